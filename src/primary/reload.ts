/**
 * A reload (SIGHUP): the workers replaced one at a time. A new worker must
 * listen before the old one of its slot retires, so capacity never drops
 * (pm2#3078, #1875), and the old one stops accepting at once instead of
 * sharing new connections while it drains (pm2#5043). A replacement that fails
 * to start ends the reload and the old workers keep serving. A drain aborts it
 * (the drain takes every worker, old and new).
 */
import type {TimerGroup} from '../clock.js';
import type {Logger} from '../logger.js';
import type {Fleet} from './fleet.js';
import type {Supervisor} from './supervisor.js';
import {isGone, isServingMember, killReason, type WorkerRecord} from './worker-record.js';

export interface ReloadOptions {
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
	readonly signal: AbortSignal;
}

export type ReloadResult = {readonly kind: 'finished' | 'failed' | 'abandoned'; readonly replaced: number};

export async function reload(options: ReloadOptions): Promise<ReloadResult> {
	const {fleet, supervisor, logger, timers, signal} = options;
	const startedAt = timers.clock.now();
	const old = fleet.alive.filter(record => isServingMember(record)).sort((a, b) => a.slot - b.slot);
	logger.info({workers: old.length}, 'reload started');
	let replaced = 0;
	for (const record of old) {
		if (isGone(record)) {
			// Crashed meanwhile: its own restart fills the slot.
			continue;
		}

		const candidate = fleet.fork(record.slot, 'candidate', 'reload');
		// eslint-disable-next-line no-await-in-loop
		const listening = await fleet.started(candidate);
		if (signal.aborted) {
			logger.info({replaced}, 'reload abandoned: the cluster is shutting down');
			return {kind: 'abandoned', replaced};
		}

		// The old worker may have crashed while its replacement started.
		const oldCrashed = isGone(record) || killReason(record.state) !== undefined;
		if (!listening) {
			logger.error({replaced, worker: candidate.id, killedFor: killReason(candidate.state), stderr: candidate.stderr.text}, 'reload failed: a new worker did not start; the old workers keep serving');
			if (oldCrashed) {
				// Its restart was left to the candidate, which failed.
				supervisor.restartSlot(record.slot);
			}

			return {kind: 'failed', replaced};
		}

		fleet.promote(candidate);
		if (!oldCrashed) {
			retire(options, record);
		}

		replaced++;
	}

	logger.info({replaced, durationMs: Math.round(timers.clock.now() - startedAt)}, 'reload finished');
	return {kind: 'finished', replaced};
}

function retire({fleet, logger, timers, lingerMs, deadlineMs}: ReloadOptions, record: WorkerRecord): void {
	fleet.retire(record, lingerMs);
	timers.timeout(() => {
		if (record.state.name !== 'gone') {
			logger.warn({worker: record.id, workerPid: record.pid, inflight: record.report?.inflight ?? null}, 'retiring worker still running at the deadline; killing it');
			fleet.kill(record, 'retire-deadline');
		}
	}, deadlineMs);
}
