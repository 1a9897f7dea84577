/**
 * One worker as the primary follows it: a single lifecycle, from fork to gone.
 *
 *   starting ─listen─▶ listening ──────────────────────────────▶ gone
 *       │                 │  (reload) ─▶ retiring ─────────────▶ gone
 *       │                 │  (drain)  ─▶ [hooks ─▶] drained ───▶ gone
 *       └─────────────────┴─ (we SIGKILL it) ─▶ killed ────────▶ gone
 *
 * Its place in the fleet and whether it has a server to drain (`attached`)
 * are part of the live states, not flags beside them. It is gone once its
 * process has exited AND its channel has closed: a `drained` still unread at
 * 'exit' must count (Node's lib/internal/cluster/primary.js waits for both).
 */
import type {LastLines} from './output.js';
import type {WorkerHandle} from './edges.js';
import type {Counts} from '../counts.js';
import {isCleanShutdownCode, SIGNAL_ACTIONS, type HandledSignal} from '../signals.js';
import {UNSENT_HOOK_FAILURE_EXIT, type ArrivalsReport} from '../protocol.js';

/** `member`: one of the N, restarted if it crashes. `candidate`: a reload's replacement, not yet promoted. */
export type Role = 'member' | 'candidate';

export type KillReason = 'listen-timeout' | 'deadline' | 'second-signal' | 'retire-deadline' | 'start-failed' | 'hung';

/**
 * Why a worker was started or replaced, in its `worker started` line (and the
 * restart's): `initial` the first N; `crash` a member that exited unplanned;
 * `hung` one killed for a silent event loop; `memory`/`requests` recycling;
 * `reload` a SIGHUP/SIGUSR2. Metrics count starts and exits by it.
 */
export type StartReason = 'initial' | 'crash' | 'hung' | 'memory' | 'requests' | 'reload';

/** Why a worker is replaced new-first (a reload, or recycling): the reason it retires for. */
export type ReplaceReason = Extract<StartReason, 'memory' | 'requests' | 'reload'>;

/**
 * Why a worker retires: replaced for one of those reasons, or `start-failed`, a
 * replacement not ready in time, stopped gently: a kill could lose a connection
 * the primary was handing it (worker/warmup.ts).
 */
export type RetireReason = ReplaceReason | 'start-failed';

/** The worker's last heartbeat (protocol.ts `HeartbeatMessage`), as the primary received it. */
export interface WorkerHealth {
	/** `clock.now()` when it was received. */
	readonly at: number;
	readonly rssBytes: number;
	readonly heapUsedBytes: number;
	readonly loopDelayMs: number;
	readonly requests: number;
	readonly inflight: number;
}

/** Where a running worker stands: what it is to the fleet, and whether it has a server to drain. */
export type PlacedState =
	| {readonly name: 'starting'; readonly role: Role; readonly attached: boolean}
	| {readonly name: 'listening'; readonly role: Role; readonly attached: boolean; readonly addresses: readonly string[]}
	/** Replaced by a reload; leaving. Its exit is planned. */
	| {readonly name: 'retiring'; readonly attached: boolean; readonly reason: RetireReason; readonly addresses: readonly string[]};

export type LiveState =
	| PlacedState
	/**
	 * Said its requests are all done and the app's shutdown hooks are running.
	 * An exit from here is the hooks' own (`process.exit()` in a hook): not a
	 * lost worker, whatever the code.
	 */
	| {readonly name: 'hooks'; readonly from: PlacedState}
	/** Said it drained (requests done, hooks ran); about to exit 0. */
	| {readonly name: 'drained'; readonly from: PlacedState}
	/** We sent it SIGKILL; waiting for it to be gone. */
	| {readonly name: 'killed'; readonly reason: KillReason; readonly before: Exclude<LiveState, {name: 'killed'}>};

export type WorkerState =
	| LiveState
	| {readonly name: 'gone'; readonly code: number | null; readonly signal: string | null; readonly last: LiveState};

/** A worker's last counts (counts.ts). */
export interface InflightReport extends Counts {
	/** Its arrival telemetry since the signal (worker/arrivals.ts); undefined from an older helper, or before its first report. */
	readonly arrivals?: ArrivalsReport | undefined;
}

/**
 * A replacement's warm-up as it reported it (worker/warmup.ts): `none` where
 * listening is enough (not a replacement, nothing drained); `warming` with the
 * checks that failed last; `ready`.
 */
export type Warmup =
	| {readonly name: 'none'}
	| {readonly name: 'warming'; readonly failures: readonly string[]}
	| {readonly name: 'ready'; readonly at: number};

export interface WorkerRecord {
	readonly id: number;
	readonly pid: number;
	/** Which of the N places this worker fills; its replacement takes the same one. */
	readonly slot: number;
	readonly handle: WorkerHandle;
	readonly startedAt: number;
	readonly startReason: StartReason;
	/** The last lines it wrote to stderr: a failed start's reason. */
	readonly stderr: LastLines;
	state: WorkerState;
	/** Its last in-flight report (during a drain or a retire). */
	report: InflightReport | undefined;
	/** The id of the last `report-now` it answered (primary/drain.ts, the adaptive rule). */
	reportedNow?: number;
	/** Its last heartbeat; undefined until the first. */
	health: WorkerHealth | undefined;
	/** What its drained servers listen on (ports, socket paths), as it reported them. */
	readonly covered: Set<string>;
	/** Its shutdown hooks and app signal listeners that threw or rejected, by name, as it reported them. */
	readonly hooksFailed: string[];
	/**
	 * The drain's basic drain disconnected it (basic-drain.ts): its own shutdown
	 * runs from then on, so how it ends is that shutdown's verdict, not a loss.
	 */
	leftForBasicDrain?: boolean;
	warmup: Warmup;
}

/** The part of a logged address that a worker's drained server reports: the port, or a socket's path. */
export function addressKey(address: string): string {
	const port = /:(\d+)$/.exec(address);
	return port && !address.startsWith('/') ? port[1]! : address;
}

/**
 * Addresses the worker listens on that no drained server covers: a raw `net`
 * protocol, a server the app left out (`exclude()`), any server with
 * `--auto-attach off` and no attach(). Nothing counts their requests.
 */
export function uncovered(record: WorkerRecord): string[] {
	const place = placeOf(record.state);
	if (place.name === 'starting') {
		return [];
	}

	return place.addresses.filter(address => !record.covered.has(addressKey(address)));
}

export const isGone = (record: WorkerRecord): boolean => record.state.name === 'gone';

/**
 * Requests it is handling, as far as the primary knows: its last drain report,
 * or its last heartbeat (a worker whose loop blocked before it read the drain
 * never reports); undefined for one with nothing to drain, whose heartbeat counts nothing.
 */
export const knownInflight = (record: WorkerRecord): number | undefined => record.report?.inflight ?? (isAttached(record.state) ? record.health?.inflight : undefined);

/** `knownInflight`, 0 when unknown: for sums. */
export const inflightOf = (record: WorkerRecord): number => knownInflight(record) ?? 0;

/** What the worker was doing when it was last alive, through a kill: what its exit is judged by. */
export function lastLive(state: WorkerState): Exclude<LiveState, {name: 'killed'}> {
	const live = state.name === 'gone' ? state.last : state;
	return live.name === 'killed' ? live.before : live;
}

/** Where it stood in the fleet, through a kill or a drain. */
export function placeOf(state: WorkerState): PlacedState {
	const live = lastLive(state);
	return live.name === 'drained' || live.name === 'hooks' ? live.from : live;
}

/** A running worker's place in the fleet: the states a message from it can move on. */
export function isPlaced(state: WorkerState): state is PlacedState {
	return state.name === 'starting' || state.name === 'listening' || state.name === 'retiring';
}

/** Why we killed it, if we did. */
export function killReason(state: WorkerState): KillReason | undefined {
	const live = state.name === 'gone' ? state.last : state;
	return live.name === 'killed' ? live.reason : undefined;
}

/**
 * A worker with nothing to drain that ended by itself, as its basic drain ends it:
 * 0, or 0 with a listener's failure it could not send (protocol.ts
 * UNSENT_HOOK_FAILURE_EXIT). Not killed, not signalled.
 */
export function leftByBasicDrain(state: Extract<WorkerState, {name: 'gone'}>): boolean {
	return !placeOf(state).attached && killReason(state) === undefined && state.signal === null && (state.code === 0 || state.code === UNSENT_HOOK_FAILURE_EXIT);
}

/**
 * How a worker the drain's basic drain disconnected ended, where that was its
 * own shutdown's doing: `own`, it exited by itself (whatever the code: a
 * failing one is that shutdown's failure); `cut`, the deadline killed it while
 * its shutdown ran, having never listened (it held nothing). Undefined: not
 * disconnected so, or ended otherwise (a signal, a kill of one that listened).
 */
export function basicDrainEnd(record: WorkerRecord): 'own' | 'cut' | undefined {
	const {state} = record;
	if (record.leftForBasicDrain !== true || state.name !== 'gone') {
		return undefined;
	}

	const killed = killReason(state);
	if (killed === undefined && state.signal === null) {
		return 'own';
	}

	return killed === 'deadline' && placeOf(state).name === 'starting' ? 'cut' : undefined;
}

/**
 * How many of the worker's shutdown hooks and app signal listeners failed:
 * those it reported (threw, rejected), plus one for its own exit once its
 * requests were done, if that was a failure (`process.exit(1)` in a hook; 143
 * after SIGTERM is not, signals.ts), or
 * a kill that cut them (the deadline, a second signal); for a worker without
 * attach(), the exit code that says one failed after its disconnect.
 */
export function hookFailures(record: WorkerRecord): number {
	const {state} = record;
	let failures = record.hooksFailed.length;
	if (state.name === 'gone') {
		const last = lastLive(state).name;
		if (last === 'hooks' || last === 'drained') {
			const cut = killReason(state) !== undefined;
			const failedExit = state.signal === null ? !isCleanShutdownCode(state.code) : last === 'hooks';
			if (cut || failedExit) {
				failures++;
			}
		} else if (basicDrainEnd(record) !== undefined) {
			// Its own shutdown ran from the disconnect: a failing exit code (one it
			// could not send included, UNSENT_HOOK_FAILURE_EXIT) or the deadline's kill is its failure.
			if (basicDrainEnd(record) === 'cut' || !isCleanShutdownCode(state.code)) {
				failures++;
			}
		} else if (leftByBasicDrain(state) && state.code === UNSENT_HOOK_FAILURE_EXIT) {
			// One at least: how many it could not say.
			failures++;
		}
	}

	return failures;
}

/** The app called `attach()`: the worker drains itself. */
export const isAttached = (state: WorkerState): boolean => placeOf(state).attached;

export function roleOf(state: WorkerState): Role | 'retiring' {
	const place = placeOf(state);
	return place.name === 'retiring' ? 'retiring' : place.role;
}

/** A member that serves: what a reload replaces and what keeps the cluster from giving up. */
export const isServingMember = (record: WorkerRecord): boolean => record.state.name === 'listening' && record.state.role === 'member';

/** Why a worker left: its `worker exited` line's `reason`, and what `worker_exits_total{reason}` counts. */
export type ExitReason = 'drain' | 'crash' | 'hung' | 'deadline' | 'second-signal' | 'start-failed' | ReplaceReason;

/**
 * `drain`: it drained (or exited during its hooks); `memory`, `requests`,
 * `reload`: replaced for that reason and retired; `hung`: killed for a silent
 * event loop; `deadline`: killed by the drain's deadline; `second-signal`: by a second signal;
 * `start-failed`: it never listened in time, or the cluster gave up; `crash`:
 * anything else. `draining`: the cluster's drain has begun.
 */
export function exitReason(state: Extract<WorkerState, {name: 'gone'}>, {draining = false, leftForBasicDrain = false}: {draining?: boolean; leftForBasicDrain?: boolean} = {}): ExitReason {
	switch (killReason(state)) {
		case 'hung': {
			return 'hung';
		}

		case 'second-signal': {
			return 'second-signal';
		}

		case 'deadline':
		case 'retire-deadline': {
			return 'deadline';
		}

		case 'listen-timeout':
		case 'start-failed': {
			return 'start-failed';
		}

		case undefined: {
			break;
		}

		default: {
			const never: never = killReason(state) as never;
			throw new Error(`unknown kill reason ${String(never)}`);
		}
	}

	const place = placeOf(state);
	const last = lastLive(state).name;
	// A retired worker leaves as planned by draining, or, with nothing to drain, by
	// exiting 0 once its connections end; so does any worker with nothing to drain
	// in the cluster's drain (its basic drain), and one still loading that a
	// group signal ended (before the bootstrap could hold it). Anything else is
	// a crash: one that crashed while starting held no request
	// (drain.ts `leftCleanly`), but it crashed.
	const basicDrain = leftByBasicDrain(state);
	const stopped = place.name === 'starting' && state.signal !== null && SIGNAL_ACTIONS[state.signal as HandledSignal] === 'drain';
	// Disconnected by the drain's basic drain: its own shutdown ended it, however.
	const shutDown = draining && leftForBasicDrain && state.signal === null;
	const planned = last === 'drained' || last === 'hooks' || (place.name === 'retiring' && basicDrain) || (draining && (basicDrain || stopped)) || shutDown;
	if (!planned) {
		return 'crash';
	}

	return place.name === 'retiring' ? place.reason : 'drain';
}
