/**
 * The fleet's policy while the cluster runs: keep N workers, replace the ones
 * that crash with exponential backoff per slot, and give up after
 * `maxStartFailures` failed starts in a row with no worker serving: an app
 * that cannot start must not spin forever, so Kubernetes shows
 * CrashLoopBackOff with the app's own error.
 */
import {TimerGroup, type Clock, type Timer} from '../clock.js';
import type {Logger} from '../logger.js';
import {isCleanShutdownCode} from '../signals.js';
import type {Fleet} from './fleet.js';
import {
	exitReason, isServingMember, killReason, lastLive, placeOf, roleOf, type WorkerRecord,
} from './worker-record.js';

export interface SupervisorOptions {
	readonly count: number;
	/** A worker that has not listened by then is killed as a failed start; 0 waits forever. */
	readonly listenTimeoutMs: number;
	readonly maxStartFailures: number;
	readonly restartDelayMs: number;
	readonly maxRestartDelayMs: number;
	/** A worker that stayed up this long starts its slot's backoff over. */
	readonly backoffResetMs: number;
}

export function restartDelay(options: Pick<SupervisorOptions, 'restartDelayMs' | 'maxRestartDelayMs'>, failures: number): number {
	return Math.min(options.maxRestartDelayMs, options.restartDelayMs * (2 ** failures));
}

export class Supervisor {
	private mode: 'running' | 'frozen' = 'running';
	private readonly slotFailures: number[] = [];
	private startFailuresInARow = 0;
	private readonly timers: TimerGroup;
	private readonly listenTimers = new Map<WorkerRecord, Timer>();

	constructor(
		private readonly fleet: Fleet,
		private readonly options: SupervisorOptions,
		private readonly clock: Clock,
		private readonly logger: Logger,
		/** Too many failed starts in a row while nothing serves; `record` is the last one. */
		private readonly onGiveUp: (record: WorkerRecord) => void,
	) {
		this.timers = new TimerGroup(clock);
		fleet.on('forked', record => {
			this.armListenTimeout(record);
		});
		fleet.on('listening', record => {
			this.timers.clear(this.listenTimers.get(record));
			this.listenTimers.delete(record);
			this.startFailuresInARow = 0;
		});
		fleet.on('gone', record => {
			this.timers.clear(this.listenTimers.get(record));
			this.listenTimers.delete(record);
			this.onGone(record);
		});
	}

	start(): void {
		for (let slot = 0; slot < this.options.count; slot++) {
			this.slotFailures[slot] = 0;
			this.fleet.fork(slot);
		}
	}

	/** No more restarts or listen timeouts: the cluster is draining or stopping. */
	freeze(): void {
		this.mode = 'frozen';
		this.timers.clearAll();
		this.listenTimers.clear();
	}

	/** Replaces a slot's worker now (after a failed reload whose old worker had crashed). */
	restartSlot(slot: number): void {
		if (this.mode === 'running') {
			this.fleet.fork(slot, 'member', 'crash');
		}
	}

	private armListenTimeout(record: WorkerRecord): void {
		const {listenTimeoutMs} = this.options;
		if (listenTimeoutMs === 0 || this.mode !== 'running') {
			return;
		}

		this.listenTimers.set(record, this.timers.timeout(() => {
			this.listenTimers.delete(record);
			if (record.state.name === 'starting') {
				this.logger.error({worker: record.id, workerPid: record.pid, listenTimeoutMs}, 'worker did not listen in time; killing it');
				this.fleet.kill(record, 'listen-timeout');
			}
		}, listenTimeoutMs));
	}

	private onGone(record: WorkerRecord): void {
		const {state} = record;
		if (state.name !== 'gone') {
			return;
		}

		const last = lastLive(state);
		const place = placeOf(state);
		const role = roleOf(state);
		const killedFor = killReason(state);
		const uptimeMs = Math.round(this.clock.now() - record.startedAt);
		// An exit during the shutdown hooks comes after every request was done:
		// planned, though a non-zero code means a hook failed.
		const exitedFor = exitReason(state, {draining: this.mode === 'frozen', leftForBasicDrain: record.leftForBasicDrain});
		const crashed = role === 'member' ? last.name !== 'drained' && last.name !== 'hooks' : exitedFor === 'crash';
		const log = {
			worker: record.id,
			workerPid: record.pid,
			code: state.code,
			signal: state.signal,
			uptimeMs,
			state: last.name,
			...(role === 'member' ? {} : {workerRole: role}),
			...(record.report ? {inflight: record.report.inflight} : {}),
			...(killedFor ? {killedFor} : {}),
			reason: exitedFor,
		};
		// After its hooks, or after it said it drained: the exit code the app set (its `'beforeExit'` and `'exit'` listeners' too).
		if ((last.name === 'hooks' || last.name === 'drained' || record.leftForBasicDrain === true) && killedFor === undefined && (state.signal !== null || !isCleanShutdownCode(state.code))) {
			this.logger.error({worker: record.id, workerPid: record.pid, code: state.code, signal: state.signal}, 'a shutdown hook exited the worker with a failure');
		}

		if (crashed && this.mode === 'running') {
			this.logger.error(log, 'worker exited');
		} else {
			this.logger.info(log, 'worker exited');
		}

		if (this.mode !== 'running' || role !== 'member') {
			return;
		}

		if (place.name === 'starting') {
			this.startFailuresInARow++;
			// Give up only when nothing serves: with other workers listening, the app
			// can start, and killing them would drop their requests. The capped
			// backoff keeps retrying this slot instead.
			if (this.startFailuresInARow >= this.options.maxStartFailures && !this.fleet.alive.some(isServingMember)) {
				this.freeze();
				this.onGiveUp(record);
				return;
			}
		}

		if (this.fleet.alive.some(other => other.slot === record.slot && roleOf(other.state) === 'candidate')) {
			// A reload is starting this slot's replacement: it takes the slot.
			this.logger.info({slot: record.slot}, 'not restarting: a replacement for this slot is starting');
			return;
		}

		if (uptimeMs >= this.options.backoffResetMs) {
			this.slotFailures[record.slot] = 0;
		}

		const failures = this.slotFailures[record.slot] ?? 0;
		this.slotFailures[record.slot] = failures + 1;
		const delayMs = restartDelay(this.options, failures);
		const reason = killedFor === 'hung' ? 'hung' : 'crash';
		this.logger.info({slot: record.slot, delayMs, failuresInARow: this.startFailuresInARow, reason}, 'restarting worker');
		this.timers.timeout(() => {
			if (this.mode === 'running') {
				this.fleet.fork(record.slot, 'member', reason);
			}
		}, delayMs);
	}
}
