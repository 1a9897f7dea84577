/**
 * One worker as the primary follows it: a single lifecycle, from fork to gone.
 *
 *   starting ─listen─▶ listening ──────────────────────────────▶ gone
 *       │                 │  (reload) ─▶ retiring ─────────────▶ gone
 *       │                 │  (drain)  ─▶ [hooks ─▶] drained ───▶ gone
 *       └─────────────────┴─ (we SIGKILL it) ─▶ killed ────────▶ gone
 *
 * It is gone once its process has exited AND its channel has closed: a
 * `drained` still unread at 'exit' must count (nodejs/node
 * lib/internal/cluster/primary.js waits for both).
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
 * Why a worker was started: `initial` the first N; `crash` a member that
 * exited unplanned; `hung` one killed for a silent event loop;
 * `memory`/`requests` recycling; `reload` a SIGHUP/SIGUSR2.
 */
export type StartReason = 'initial' | 'crash' | 'hung' | 'memory' | 'requests' | 'reload';

/** Why a worker is replaced new-first: the reason it retires for. */
export type ReplaceReason = Extract<StartReason, 'memory' | 'requests' | 'reload'>;

/** `start-failed`: a replacement not ready in time, retired rather than killed, which could lose a connection being handed to it. */
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
	/** `--max-event-loop-delay`'s running totals and whether it sheds now; absent when off. */
	readonly shed?: number | undefined;
	readonly sheddingMs?: number | undefined;
	readonly shedding?: boolean | undefined;
}

/** Where a running worker stands: what it is to the fleet, and whether it has a server to drain. */
export type PlacedState =
	| {readonly name: 'starting'; readonly role: Role; readonly attached: boolean}
	| {readonly name: 'listening'; readonly role: Role; readonly attached: boolean; readonly addresses: readonly string[]}
	/** Leaving, replaced or not ready in time; its exit is planned. */
	| {readonly name: 'retiring'; readonly attached: boolean; readonly reason: RetireReason; readonly addresses: readonly string[]};

export type LiveState =
	| PlacedState
	/** Its requests are done and its hooks run: an exit from here is the hooks' own, not a lost worker. */
	| {readonly name: 'hooks'; readonly from: PlacedState}
	/** Said it drained (requests done, hooks ran); about to exit 0. */
	| {readonly name: 'drained'; readonly from: PlacedState}
	| {readonly name: 'killed'; readonly reason: KillReason; readonly before: Exclude<LiveState, {name: 'killed'}>};

export type WorkerState =
	| LiveState
	| {readonly name: 'gone'; readonly code: number | null; readonly signal: string | null; readonly last: LiveState};

export interface InflightReport extends Counts {
	/** Its arrival telemetry since the signal (worker/arrivals.ts). */
	readonly arrivals?: ArrivalsReport | undefined;
}

/** A replacement's warm-up as it reported it; `none` where listening is enough. */
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
	/** The id of the last `report-now` it answered. */
	reportedNow?: number;
	health: WorkerHealth | undefined;
	/** What its drained servers listen on (ports, socket paths), as it reported them. */
	readonly covered: Set<string>;
	/** Its hooks and app signal listeners that failed, by name. */
	readonly hooksFailed: string[];
	/** The basic drain disconnected it: how it ends from then on is its own shutdown's verdict, not a loss. */
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
 * Its last drain report, else its last heartbeat (a worker whose loop blocked
 * before it read the drain never reports); undefined with nothing to drain.
 */
export const knownInflight = (record: WorkerRecord): number | undefined => record.report?.inflight ?? (isAttached(record.state) ? record.health?.inflight : undefined);

/** 0 when unknown: for sums. */
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

export function killReason(state: WorkerState): KillReason | undefined {
	const live = state.name === 'gone' ? state.last : state;
	return live.name === 'killed' ? live.reason : undefined;
}

/** A worker with nothing to drain that exited by itself, 0 or UNSENT_HOOK_FAILURE_EXIT: not killed, not signalled. */
export function leftByBasicDrain(state: Extract<WorkerState, {name: 'gone'}>): boolean {
	return !placeOf(state).attached && killReason(state) === undefined && state.signal === null && (state.code === 0 || state.code === UNSENT_HOOK_FAILURE_EXIT);
}

/**
 * How a worker the basic drain disconnected ended, where that was its own
 * shutdown's doing: `own`, it exited by itself (a failing code is that
 * shutdown's failure); `cut`, the deadline killed it while its shutdown ran,
 * having never listened (it held nothing).
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
 * those it reported, plus one for a failing exit once its requests were done
 * (`process.exit(1)` in a hook; 143 after SIGTERM is not) or a kill that cut
 * them.
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
 * `drain`: it drained (or exited during its hooks); `start-failed`: it never
 * listened in time, or the cluster gave up; `crash`: anything not planned.
 * `draining`: the cluster's drain has begun.
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
	// A retired worker leaves as planned by draining, or, with nothing to drain,
	// by exiting 0; so does any worker with nothing to drain in the cluster's
	// drain, and one still loading that a group signal ended before the
	// bootstrap could hold it. Anything else is a crash.
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
