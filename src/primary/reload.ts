/**
 * Replacing workers without dropping a request, for a reload (SIGHUP) and for
 * recycling (recycle.ts: memory, requests).
 *
 * `Replacer.replace(record, reason)` replaces one slot's worker: a new worker
 * must listen before the old one retires, so capacity never drops (pm2#3078,
 * #1875), and the old one stops accepting at once instead of sharing new
 * connections while it drains (pm2#5043). At most one replacement per slot runs
 * at a time.
 *
 * `reload()` replaces every serving member that way, one slot at a time. A
 * replacement that fails to start ends the reload and the old workers keep
 * serving. A drain aborts it (the drain takes every worker, old and new).
 */
import type {TimerGroup} from '../clock.js';
import type {Logger} from '../logger.js';
import type {Fleet} from './fleet.js';
import type {Supervisor} from './supervisor.js';
import {isGone, isServingMember, killReason, type ReplaceReason, type WorkerRecord} from './worker-record.js';

export type {ReplaceReason} from './worker-record.js';

export interface ReplacerOptions {
	readonly fleet: Fleet;
	readonly supervisor: Supervisor;
	readonly logger: Logger;
	/**
	 * Where a retired worker's deadline is kept: it outlives the reload, and a
	 * drain that starts meanwhile clears it (its own deadline covers the worker).
	 */
	readonly timers: TimerGroup;
	/** How long a retired worker keeps idle keep-alive connections for their next request. */
	readonly lingerMs: number;
	/** A retired worker still running after this is killed. */
	readonly deadlineMs: number;
	/**
	 * Aborted when the cluster begins to shut down (a drain, a give-up): a
	 * replacement still starting then completes nothing (no promote, no retire);
	 * the drain takes the old worker and the new one alike.
	 */
	readonly shutdown: AbortSignal;
}

/**
 * `replaced`: the new worker serves, the old one retires (or had crashed).
 * `failed`: the new worker did not start; the old one keeps serving.
 * `abandoned`: the cluster began shutting down meanwhile.
 * `busy`: the slot is already being replaced; nothing was done.
 */
export type ReplaceResult =
	| {readonly kind: 'replaced'}
	| {readonly kind: 'failed'; readonly candidate: WorkerRecord}
	| {readonly kind: 'abandoned'}
	| {readonly kind: 'busy'};

export class Replacer {
	/** Slots whose replacement is starting. */
	private readonly busy = new Set<number>();

	constructor(private readonly options: ReplacerOptions) {}

	/** True while a replacement for this slot is starting. */
	replacing(slot: number): boolean {
		return this.busy.has(slot);
	}

	/**
	 * `by`: the signal that asked for it (a reload's SIGHUP or SIGUSR2), told to
	 * the retiring worker: the app's own listeners for it run as it leaves.
	 */
	async replace(record: WorkerRecord, reason: ReplaceReason, signal?: AbortSignal, by?: NodeJS.Signals): Promise<ReplaceResult> {
		const {fleet, supervisor, logger} = this.options;
		if (this.busy.has(record.slot)) {
			return {kind: 'busy'};
		}

		this.busy.add(record.slot);
		try {
			const candidate = fleet.fork(record.slot, 'candidate', reason);
			const listening = await fleet.started(candidate);
			if (signal?.aborted || this.options.shutdown.aborted) {
				return {kind: 'abandoned'};
			}

			// The old worker may have crashed while its replacement started.
			const oldCrashed = isGone(record) || killReason(record.state) !== undefined;
			if (!listening) {
				if (oldCrashed) {
					// Its restart was left to the candidate, which failed.
					supervisor.restartSlot(record.slot);
				}

				return {kind: 'failed', candidate};
			}

			fleet.promote(candidate);
			if (!oldCrashed) {
				this.retire(record, reason, by);
			}

			logger.info({slot: record.slot, worker: candidate.id, replaced: record.id, reason}, 'worker replaced');
			return {kind: 'replaced'};
		} finally {
			this.busy.delete(record.slot);
		}
	}

	private retire(record: WorkerRecord, reason: ReplaceReason, by: NodeJS.Signals | undefined): void {
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
	const old = fleet.alive.filter(record => isServingMember(record)).sort((a, b) => a.slot - b.slot);
	logger.info({signal: by, workers: old.length}, 'reload started');
	let replaced = 0;
	for (const record of old) {
		if (isGone(record)) {
			// Crashed meanwhile: its own restart fills the slot.
			continue;
		}

		// A recycle may be replacing this slot (it started before the reload): wait for it.
		// eslint-disable-next-line no-await-in-loop
		let result = await replacer.replace(record, 'reload', signal, by);
		while (result.kind === 'busy' && !signal.aborted) {
			// eslint-disable-next-line no-await-in-loop
			await new Promise(resolve => {
				timers.timeout(() => resolve(undefined), BUSY_POLL_MS);
			});
			// eslint-disable-next-line no-await-in-loop
			result = isGone(record) || record.state.name === 'retiring' ? {kind: 'replaced'} : await replacer.replace(record, 'reload', signal, by);
		}

		if (result.kind === 'abandoned' || signal.aborted) {
			logger.info({replaced}, 'reload abandoned: the cluster is shutting down');
			return {kind: 'abandoned', replaced};
		}

		if (result.kind === 'failed') {
			const {candidate} = result;
			logger.error({replaced, worker: candidate.id, killedFor: killReason(candidate.state), stderr: candidate.stderr.text}, 'reload failed: a new worker did not start; the old workers keep serving');
			return {kind: 'failed', replaced};
		}

		replaced++;
	}

	logger.info({replaced, durationMs: Math.round(timers.clock.now() - startedAt)}, 'reload finished');
	return {kind: 'finished', replaced};
}
