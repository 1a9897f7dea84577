/**
 * The workers: forking them with `node:cluster`, following each through its
 * states, forwarding their output, and replacing the ones that crash while the
 * cluster runs, with exponential backoff and a limit on failed starts in a row.
 *
 *   starting -> listening -> (drained) -> exited
 *
 * A worker that exits before it listens, or does not listen within the listen
 * timeout, is a failed start. After `maxStartFailures` failed starts in a row
 * (any listening worker resets the count) the fleet gives up: an app that cannot
 * start must not spin forever, so that Kubernetes shows CrashLoopBackOff with the
 * app's own error.
 */
import cluster, {type Worker} from 'node:cluster';
import {performance} from 'node:perf_hooks';
import type {Logger} from '../logger.js';
import {parseMessage, type ToPrimary, type ToWorker, envelope} from '../protocol.js';
import {LastLines, LineForwarder, type LineSink} from './output.js';

export type WorkerState =
	| {readonly name: 'starting'}
	| {readonly name: 'listening'; readonly address: string}
	| {readonly name: 'drained'; readonly served: number; readonly rejected: number; readonly durationMs: number}
	| {readonly name: 'exited'; readonly code: number | null; readonly signal: string | null; readonly before: WorkerState};

export interface InflightReport {
	readonly inflight: number;
	readonly served: number;
	readonly rejected: number;
}

export interface WorkerRecord {
	readonly id: number;
	readonly pid: number;
	/** Which of the N places this worker fills; its replacement takes the same one. */
	readonly slot: number;
	/**
	 * `member`: one of the N; replaced if it crashes. `candidate`: started by a
	 * reload, not yet a member; never restarted. `retiring`: replaced by a reload,
	 * leaving; its exit is planned.
	 */
	role: 'member' | 'candidate' | 'retiring';
	readonly worker: Worker;
	readonly startedAt: number;
	readonly stderr: LastLines;
	state: WorkerState;
	/** The app called `attach()`: the worker drains itself. */
	attached: boolean;
	/** The last in-flight report, during a drain. */
	report: InflightReport | undefined;
	/** Why it was killed by us, if it was. */
	killedFor: 'listen-timeout' | 'deadline' | 'second-signal' | 'retire-deadline' | 'start-failed' | undefined;
}

export interface FleetOptions {
	readonly script: string;
	readonly args: readonly string[];
	readonly execArgv: readonly string[];
	readonly env: Readonly<Record<string, string>>;
	readonly count: number;
	readonly listenTimeoutMs: number;
	readonly maxStartFailures: number;
	readonly restartDelayMs: number;
	readonly maxRestartDelayMs: number;
	/** A worker that stayed up this long resets its slot's backoff. */
	readonly backoffResetMs: number;
	readonly logger: Logger;
	/** Where the workers' output goes: the same writers the primary logs through. */
	readonly stdout: LineSink;
	readonly stderr: LineSink;
}

export interface FleetEvents {
	message(record: WorkerRecord, message: ToPrimary): void;
	exit(record: WorkerRecord): void;
	/** Too many failed starts in a row; `record` is the last one. */
	giveUp(record: WorkerRecord): void;
}

const MAX_INVALID_LOGS = 5;

export class Fleet {
	readonly records = new Map<number, WorkerRecord>();
	private mode: 'running' | 'frozen' = 'running';
	private readonly slotFailures: number[] = [];
	private readonly timers = new Set<NodeJS.Timeout>();
	private startFailuresInARow = 0;
	private invalidLogs = 0;
	/** Workers' output streams not yet ended: their last lines may still be in the pipes. */
	private readonly pendingOutput = new Set<Promise<void>>();
	/** Who waits for a worker's start: resolved true when it listens, false if it exits first. */
	private readonly startWaiters = new Map<number, (listening: boolean) => void>();

	constructor(private readonly options: FleetOptions, private readonly events: FleetEvents) {
		cluster.setupPrimary({
			exec: options.script,
			args: [...options.args],
			execArgv: [...options.execArgv],
			silent: true,
		});
	}

	start(): void {
		for (let slot = 0; slot < this.options.count; slot++) {
			this.slotFailures[slot] = 0;
			this.fork(slot);
		}
	}

	/** Workers not yet exited. */
	get alive(): WorkerRecord[] {
		return [...this.records.values()].filter(record => record.state.name !== 'exited');
	}

	/** No more restarts or listen timeouts: the cluster is draining or stopping. */
	freeze(): void {
		this.mode = 'frozen';
		for (const timer of this.timers) {
			clearTimeout(timer);
		}

		this.timers.clear();
	}

	send(record: WorkerRecord, message: ToWorker): void {
		if (record.worker.isConnected()) {
			// A worker can disconnect between the check and the send; the error
			// arrives asynchronously and is not ours to report (its exit is).
			record.worker.send(envelope(message), undefined, () => {});
		}
	}

	/**
	 * SIGKILL through `worker.process.kill`: `worker.kill()` disconnects first and
	 * never stops a worker whose event loop is blocked (nodejs/node#22703).
	 */
	kill(record: WorkerRecord, reason: NonNullable<WorkerRecord['killedFor']>): void {
		record.killedFor = reason;
		record.worker.process.kill('SIGKILL');
	}

	/** Resolves true once the worker listens, false if it exits (or is killed) first. */
	started(record: WorkerRecord): Promise<boolean> {
		if (record.state.name !== 'starting') {
			return Promise.resolve(record.state.name !== 'exited');
		}

		return new Promise(resolve => {
			this.startWaiters.set(record.id, resolve);
		});
	}

	/**
	 * Resolves once every worker's stdout and stderr have ended, so the lines a
	 * worker wrote just before it exited reach the log before the primary exits;
	 * or after `timeoutMs`, in case a process the app started still holds a pipe.
	 */
	async outputFlushed(timeoutMs: number): Promise<void> {
		let timer: NodeJS.Timeout | undefined;
		await Promise.race([
			Promise.all(this.pendingOutput),
			new Promise<void>(resolve => {
				timer = setTimeout(resolve, timeoutMs);
			}),
		]);
		clearTimeout(timer);
	}

	/** A reload's replacement for `slot`. */
	forkCandidate(slot: number): WorkerRecord {
		return this.fork(slot, 'candidate');
	}

	promote(record: WorkerRecord): void {
		record.role = 'member';
	}

	/**
	 * Replaced by a reload: a worker with the helper leaves on its own after the
	 * linger; one without is disconnected (its server stops accepting, it exits
	 * when its connections end). Either is killed if still there at the deadline.
	 */
	retire(record: WorkerRecord, lingerMs: number, deadlineMs: number): void {
		record.role = 'retiring';
		if (record.attached) {
			this.send(record, {type: 'retire', lingerMs});
		} else if (record.worker.isConnected()) {
			record.worker.disconnect();
		}

		this.timer(() => {
			if (record.state.name !== 'exited') {
				this.options.logger.warn({worker: record.id, workerPid: record.pid, inflight: record.report?.inflight ?? null}, 'retiring worker still running at the deadline; killing it');
				this.kill(record, 'retire-deadline');
			}
		}, deadlineMs);
	}

	private fork(slot: number, role: WorkerRecord['role'] = 'member'): WorkerRecord {
		const worker = cluster.fork({...this.options.env});
		const record: WorkerRecord = {
			id: worker.id,
			pid: worker.process.pid ?? 0,
			slot,
			role,
			worker,
			startedAt: performance.now(),
			stderr: new LastLines(),
			state: {name: 'starting'},
			attached: false,
			report: undefined,
			killedFor: undefined,
		};
		this.records.set(worker.id, record);
		const {stdout, stderr} = worker.process;
		const output = Promise.all([
			stdout ? new LineForwarder(this.options.stdout).attach(stdout) : undefined,
			stderr ? new LineForwarder(this.options.stderr, record.stderr.add).attach(stderr) : undefined,
		]).then(() => {
			this.pendingOutput.delete(output);
		});
		this.pendingOutput.add(output);

		this.options.logger.info({worker: record.id, workerPid: record.pid, slot, ...(role === 'member' ? {} : {workerRole: role})}, 'worker started');
		const listenTimer = this.options.listenTimeoutMs > 0 && this.mode === 'running'
			? this.timer(() => {
				if (record.state.name === 'starting') {
					this.options.logger.error({worker: record.id, workerPid: record.pid, listenTimeoutMs: this.options.listenTimeoutMs}, 'worker did not listen in time; killing it');
					this.kill(record, 'listen-timeout');
				}
			}, this.options.listenTimeoutMs)
			: undefined;

		worker.on('listening', address => {
			if (listenTimer) {
				this.clearTimer(listenTimer);
			}

			if (record.state.name !== 'starting') {
				return;
			}

			const where = `${address.address ?? '*'}:${address.port}`;
			record.state = {name: 'listening', address: where};
			this.startFailuresInARow = 0;
			this.options.logger.info({worker: record.id, workerPid: record.pid, address: where}, 'worker listening');
			this.startWaiters.get(record.id)?.(true);
			this.startWaiters.delete(record.id);
		});
		worker.on('message', (raw: unknown) => {
			this.onMessage(record, raw);
		});
		// Errors on the IPC channel (EPIPE while the worker dies) come before its
		// 'exit'; the exit is what we report.
		worker.on('error', error => {
			this.options.logger.debug({worker: record.id, err: error}, 'worker channel error');
		});
		worker.on('exit', (code, signal) => {
			if (listenTimer) {
				this.clearTimer(listenTimer);
			}

			this.onExit(record, code, signal);
			this.startWaiters.get(record.id)?.(false);
			this.startWaiters.delete(record.id);
			// Whoever still needs the record (a drain, a reload) holds it; the map
			// only lists workers that may still run, so it does not grow with crashes.
			this.records.delete(record.id);
		});
		return record;
	}

	private onMessage(record: WorkerRecord, raw: unknown): void {
		const parsed = parseMessage<ToPrimary>(raw, ['attached', 'inflight', 'drained']);
		switch (parsed.kind) {
			case 'foreign': {
				// The app's own process.send() traffic: not ours, not an error.
				this.options.logger.trace({worker: record.id}, 'ignored an app message');
				return;
			}

			case 'invalid': {
				if (this.invalidLogs++ < MAX_INVALID_LOGS) {
					this.options.logger.warn({worker: record.id, reason: parsed.reason}, 'ignored a malformed graceful-cluster message');
				}

				return;
			}

			case 'ours': {
				const {message} = parsed;
				if (message.type === 'attached') {
					record.attached = true;
				} else if (message.type === 'inflight') {
					record.report = {inflight: message.inflight, served: message.served, rejected: message.rejected};
				} else if (record.state.name !== 'exited') {
					record.report = {inflight: 0, served: message.served, rejected: message.rejected};
					record.state = {name: 'drained', served: message.served, rejected: message.rejected, durationMs: message.durationMs};
				}

				this.events.message(record, message);
				return;
			}

			default: {
				const never: never = parsed;
				throw new Error(`unexpected ${String(never)}`);
			}
		}
	}

	private onExit(record: WorkerRecord, code: number | null, signal: string | null): void {
		const before = record.state;
		record.state = {name: 'exited', code, signal, before};
		const uptimeMs = Math.round(performance.now() - record.startedAt);
		const crashed = before.name !== 'drained' && record.role === 'member';
		const log = {worker: record.id, workerPid: record.pid, code, signal, uptimeMs, state: before.name, ...(record.role === 'member' ? {} : {workerRole: record.role}), ...(record.report ? {inflight: record.report.inflight} : {}), ...(record.killedFor ? {killedFor: record.killedFor} : {})};
		if (crashed && this.mode === 'running') {
			this.options.logger.error(log, 'worker exited');
		} else {
			this.options.logger.info(log, 'worker exited');
		}

		this.events.exit(record);
		if (this.mode !== 'running' || record.role !== 'member') {
			return;
		}

		if (before.name === 'starting') {
			this.startFailuresInARow++;
			// Give up only when nothing serves: with other workers listening, the app
			// can start, and killing them would drop their requests. The capped
			// backoff keeps retrying this slot instead.
			if (this.startFailuresInARow >= this.options.maxStartFailures && !this.anyListening()) {
				this.freeze();
				this.events.giveUp(record);
				return;
			}
		}

		if (this.hasCandidate(record.slot)) {
			// A reload is starting this slot's replacement: it takes the slot.
			this.options.logger.info({slot: record.slot}, 'not restarting: a replacement for this slot is starting');
			return;
		}

		if (uptimeMs >= this.options.backoffResetMs) {
			this.slotFailures[record.slot] = 0;
		}

		const failures = this.slotFailures[record.slot] ?? 0;
		this.slotFailures[record.slot] = failures + 1;
		const delayMs = Math.min(this.options.maxRestartDelayMs, this.options.restartDelayMs * (2 ** failures));
		this.options.logger.info({slot: record.slot, delayMs, failuresInARow: this.startFailuresInARow}, 'restarting worker');
		this.timer(() => {
			if (this.mode === 'running') {
				this.fork(record.slot);
			}
		}, delayMs);
	}

	/** Replaces a slot's worker now (after a failed reload whose old worker had crashed). */
	restartSlot(slot: number): void {
		if (this.mode === 'running') {
			this.fork(slot);
		}
	}

	private anyListening(): boolean {
		return this.alive.some(record => record.role === 'member' && record.state.name === 'listening');
	}

	private hasCandidate(slot: number): boolean {
		return this.alive.some(record => record.role === 'candidate' && record.slot === slot);
	}

	private timer(fn: () => void, ms: number): NodeJS.Timeout {
		const timer = setTimeout(() => {
			this.timers.delete(timer);
			fn();
		}, ms);
		this.timers.add(timer);
		return timer;
	}

	private clearTimer(timer: NodeJS.Timeout): void {
		clearTimeout(timer);
		this.timers.delete(timer);
	}
}
