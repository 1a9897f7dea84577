/**
 * Replacing workers without dropping a request, for a reload (SIGHUP) and for
 * recycling (recycle.ts). The new worker must be ready before the old one
 * retires, so capacity never drops (pm2#3078, #1875): listening on every
 * address the old one did, its readiness checks passed (worker/warmup.ts),
 * within `--listen-timeout`. Then the old one stops accepting at once instead
 * of sharing new connections while it drains (pm2#5043). A new worker not
 * ready in time is stopped and the old one keeps serving.
 *
 * `reload()` replaces every member that way, one slot at a time; a failed
 * replacement ends it and a drain aborts it.
 */
import {withTimeout, type TimerGroup} from '../clock.js';
import type {Logger} from '../logger.js';
import type {Fleet} from './fleet.js';
import type {Supervisor} from './supervisor.js';
import {isGone, isServingMember, killReason, placeOf, roleOf, type ReplaceReason, type RetireReason, type WorkerRecord} from './worker-record.js';

export type {ReplaceReason} from './worker-record.js';

export interface ReplacerOptions {
	readonly fleet: Fleet;
	readonly supervisor: Supervisor;
	readonly logger: Logger;
	/** Where a retired worker's deadline is kept: it outlives the reload, and a drain clears it. */
	readonly timers: TimerGroup;
	/** How long a retired worker keeps idle keep-alive connections for their next request. */
	readonly lingerMs: number;
	/** A retired worker still running after this is killed. */
	readonly deadlineMs: number;
	/** A new worker not ready this long after its fork is killed; 0: wait forever. */
	readonly listenTimeoutMs: number;
	/** Aborted when the cluster begins to shut down: a replacement still starting completes nothing, the drain takes both workers. */
	readonly shutdown: AbortSignal;
}

/** `abandoned`: the cluster began shutting down meanwhile; `busy`: the slot is already being replaced. */
export type ReplaceResult =
	| {readonly kind: 'replaced'}
	| {readonly kind: 'failed'; readonly candidate: WorkerRecord; readonly failingChecks?: readonly string[]}
	| {readonly kind: 'abandoned'}
	| {readonly kind: 'busy'};

/** An old worker whose heartbeat is silent this long no longer counts as serving while its replacement warms up. */
const SILENT_OLD_WORKER_MS = 2000;

export class Replacer {
	/** Slots whose replacement is starting. */
	private readonly busy = new Set<number>();

	constructor(private readonly options: ReplacerOptions) {}

	replacing(slot: number): boolean {
		return this.busy.has(slot);
	}

	/** With `--listen-timeout 0` workers need not listen (a queue consumer), and this one has not. */
	servesNothing(record: WorkerRecord): boolean {
		return this.options.listenTimeoutMs === 0 && record.state.name === 'starting' && record.state.role === 'member';
	}

	/** `by`: the reload's signal, told to the retiring worker, whose app listeners for it run as it leaves. */
	async replace(record: WorkerRecord, reason: ReplaceReason, signal?: AbortSignal, by?: NodeJS.Signals): Promise<ReplaceResult> {
		const {fleet, supervisor, logger} = this.options;
		if (this.busy.has(record.slot)) {
			return {kind: 'busy'};
		}

		this.busy.add(record.slot);
		try {
			const place = placeOf(record.state);
			const addresses = place.name === 'listening' ? place.addresses : [];
			const servesNothing = this.servesNothing(record);
			const candidate = fleet.fork(record.slot, 'candidate', reason);
			const ready = await this.ready(candidate, addresses, signal, servesNothing);
			if (signal?.aborted || this.options.shutdown.aborted) {
				return {kind: 'abandoned'};
			}

			// The old worker may have crashed while its replacement started.
			const oldCrashed = isGone(record) || killReason(record.state) !== undefined;
			if (ready !== true) {
				if (oldCrashed) {
					// Its restart was left to the candidate, which failed.
					supervisor.restartSlot(record.slot);
				}

				return {kind: 'failed', candidate, ...(ready === false ? {} : {failingChecks: ready.failingChecks})};
			}

			fleet.promote(candidate);
			if (!oldCrashed) {
				this.retire(record, reason, by);
			}

			const {warmup} = candidate;
			logger.info({
				slot: record.slot,
				worker: candidate.id,
				replaced: record.id,
				reason,
				readyAfterMs: Math.round(this.options.timers.clock.now() - candidate.startedAt),
				...(warmup.name === 'ready' ? {warmedUp: true} : {}),
			}, 'worker replaced');
			return {kind: 'replaced'};
		} finally {
			this.busy.delete(record.slot);
		}
	}

	/**
	 * True once the candidate may take over; false if it stopped first; its
	 * failing checks if it was not ready within the listen timeout, after which
	 * it is retired (still starting, the supervisor's listen timeout kills it).
	 */
	private async ready(candidate: WorkerRecord, addresses: readonly string[], signal: AbortSignal | undefined, servesNothing: boolean): Promise<true | false | {readonly failingChecks: readonly string[]}> {
		const {fleet, logger, listenTimeoutMs, timers, shutdown} = this.options;
		const {clock} = timers;
		// A warming candidate refuses connections; should nothing else serve any
		// more (the old worker crashed, or its heartbeat went silent), it must take
		// them, or they would go back and forth between the primary and it.
		const serves = (other: WorkerRecord): boolean => other !== candidate && isServingMember(other)
			&& (other.health === undefined || clock.now() - other.health.at < SILENT_OLD_WORKER_MS);
		let told = false;
		const check = (): void => {
			if (!told && candidate.warmup.name === 'warming' && !fleet.alive.some(other => serves(other))) {
				told = true;
				logger.warn({worker: candidate.id, slot: candidate.slot}, 'no worker serves while the new one warms up; it takes connections now');
				fleet.send(candidate, {type: 'serve-now'});
			}
		};

		// Its `attached` may come after the old worker is gone.
		fleet.on('gone', check);
		fleet.on('message', check);
		const watch = clock.setInterval(check, SILENT_OLD_WORKER_MS / 4);
		// A drain (or the reload's abort) ends the wait at once: the drain takes the candidate.
		let onAbort: (() => void) | undefined;
		const aborted = new Promise<false>(resolve => {
			onAbort = () => {
				resolve(false);
			};

			shutdown.addEventListener('abort', onAbort);
			signal?.addEventListener('abort', onAbort);
		});
		try {
			if (shutdown.aborted || signal?.aborted) {
				return false;
			}

			const ready = Promise.race([servesNothing ? fleet.running(candidate) : fleet.ready(candidate, addresses), aborted]);
			if (listenTimeoutMs === 0) {
				return await ready;
			}

			const outcome = await withTimeout<boolean | 'late'>(ready, Math.max(0, listenTimeoutMs - (clock.now() - candidate.startedAt)), () => 'late' as const, clock);
			if (outcome !== 'late') {
				return outcome;
			}
		} finally {
			fleet.off('gone', check);
			fleet.off('message', check);
			clock.clear(watch);
			shutdown.removeEventListener('abort', onAbort!);
			signal?.removeEventListener('abort', onAbort!);
		}

		const {state, warmup} = candidate;
		const failingChecks = warmup.name === 'warming' ? warmup.failures : [];
		// A drain that began meanwhile has the candidate draining: the drain's deadline is its own.
		if (state.name === 'listening' && !this.options.shutdown.aborted) {
			const missing = addresses.filter(address => !state.addresses.includes(address));
			logger.error({
				worker: candidate.id,
				workerPid: candidate.pid,
				listenTimeoutMs,
				...(warmup.name === 'warming' ? {failingChecks} : {}),
				// Warming, but no check had finished yet: a slow start, not a failing check.
				...(warmup.name === 'warming' && failingChecks.length === 0 ? {checksPending: true} : {}),
				...(missing.length > 0 ? {notListeningOn: missing} : {}),
			}, 'new worker not ready in time; stopping it');
			this.retire(candidate, 'start-failed', undefined);
		}

		return {failingChecks};
	}

	private retire(record: WorkerRecord, reason: RetireReason, by: NodeJS.Signals | undefined): void {
		const {fleet, logger, timers, lingerMs, deadlineMs} = this.options;
		fleet.retire(record, lingerMs, reason, by);
		timers.timeout(() => {
			if (record.state.name !== 'gone') {
				logger.warn({worker: record.id, workerPid: record.pid, inflight: record.report?.inflight ?? null}, 'retiring worker still running at the deadline; killing it');
				fleet.kill(record, 'retire-deadline');
			}
		}, deadlineMs);
	}
}

export interface ReloadOptions {
	readonly fleet: Fleet;
	readonly replacer: Replacer;
	readonly logger: Logger;
	readonly timers: TimerGroup;
	readonly signal: AbortSignal;
	/** The signal that started the reload, for the log and the retiring workers. */
	readonly by: NodeJS.Signals;
}

/** How often a reload looks again at a slot a recycle is replacing. */
const BUSY_POLL_MS = 100;

export type ReloadResult = {readonly kind: 'finished' | 'failed' | 'abandoned'; readonly replaced: number};

export async function reload({fleet, replacer, logger, timers, signal, by}: ReloadOptions): Promise<ReloadResult> {
	const startedAt = timers.clock.now();
	// Members still starting too: forked before the signal, they may be loading the old release.
	const old = fleet.alive.filter(record => roleOf(record.state) === 'member' && (record.state.name === 'listening' || record.state.name === 'starting')).sort((a, b) => a.slot - b.slot);
	logger.info({signal: by, workers: old.length}, 'reload started');
	let replaced = 0;
	const finish = (kind: ReloadResult['kind']): ReloadResult => ({kind, replaced});
	/** Old workers still serving: a failed reload keeps them. */
	const kept = (): number => old.filter(record => isServingMember(record)).length;
	for (const record of old) {
		// A member still starting is replaced once it listens; one that never does is the supervisor's to restart.
		// One that serves nothing (`--listen-timeout 0`) is replaced as it is.
		// eslint-disable-next-line no-await-in-loop -- one worker at a time: a rolling reload
		if (record.state.name === 'starting' && !replacer.servesNothing(record) && !(await fleet.started(record))) {
			continue;
		}

		if (signal.aborted) {
			break;
		}

		if (!isServingMember(record) && !replacer.servesNothing(record)) {
			// Crashed meanwhile: its own restart fills the slot, with what the link points at now.
			continue;
		}

		// A recycle may be replacing this slot (it started before the reload): wait for it.
		// eslint-disable-next-line no-await-in-loop -- one worker at a time: a rolling reload
		let result = await replacer.replace(record, 'reload', signal, by);
		while (result.kind === 'busy' && !signal.aborted) {
			// eslint-disable-next-line no-await-in-loop -- a poll: wait, then ask again
			await new Promise(resolve => {
				timers.timeout(() => resolve(undefined), BUSY_POLL_MS);
			});
			// eslint-disable-next-line no-await-in-loop -- one worker at a time: a rolling reload
			result = isGone(record) || record.state.name === 'retiring' ? {kind: 'replaced'} : await replacer.replace(record, 'reload', signal, by);
		}

		if (result.kind === 'abandoned' || signal.aborted) {
			break;
		}

		if (result.kind === 'failed') {
			const {candidate, failingChecks} = result;
			logger.error({
				signal: by,
				slot: record.slot,
				replaced,
				kept: kept(),
				worker: candidate.id,
				killedFor: killReason(candidate.state),
				...(failingChecks && failingChecks.length > 0 ? {failingChecks} : {}),
				stderr: candidate.stderr.text,
			}, 'reload failed: a new worker did not start or was not ready in time; the old workers keep serving');
			return finish('failed');
		}

		replaced++;
	}

	if (signal.aborted) {
		logger.info({signal: by, replaced}, 'reload abandoned: the cluster is shutting down');
		return finish('abandoned');
	}

	logger.info({signal: by, replaced, kept: kept(), durationMs: Math.round(timers.clock.now() - startedAt)}, 'reload finished');
	return finish('finished');
}
