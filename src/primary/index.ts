/**
 * The primary: owns the workers and the shutdown timeline.
 *
 *   running --SIGTERM/SIGINT--> draining --all workers gone / deadline--> stopping
 *   running --SIGHUP--> reloading --every worker replaced / a replacement failed--> running
 *   reloading --SIGTERM/SIGINT--> draining (everything that runs, old and new)
 *
 * On the first signal it freezes the fleet (no more restarts), starts the
 * deadline timer, and broadcasts the drain message. Workers whose app attached
 * the helper run the serve and reject phases themselves and report their
 * in-flight counts; workers without it are disconnected when the reject phase
 * ends. The primary exits once every worker is gone: 0 when all drained, a named
 * non-zero code otherwise (exit-codes.ts).
 */
import {performance} from 'node:perf_hooks';
import type {Logger} from '../logger.js';
import {ExitCode} from '../exit-codes.js';
import type {DrainSettings} from '../settings.js';
import {settingsToEnv} from '../settings.js';
import type {DrainMessage} from '../protocol.js';
import {Fleet, type WorkerRecord} from './fleet.js';
import type {LineSink} from './output.js';

export interface PrimaryOptions {
	/** Absolute path of the app's entry script. */
	readonly script: string;
	readonly args: readonly string[];
	readonly workers: number;
	readonly settings: DrainSettings;
	readonly logLevel: string;
	readonly listenTimeoutMs: number;
	readonly maxStartFailures: number;
	readonly restartDelayMs: number;
	readonly maxRestartDelayMs: number;
	readonly backoffResetMs: number;
	/** Extra node flags for the workers (the primary's own `execArgv` come first). */
	readonly execArgv?: readonly string[];
}

export interface PrimaryOutput {
	readonly logger: Logger;
	/** The writers the logger uses; the workers' lines are forwarded through them too. */
	readonly stdout: LineSink;
	readonly stderr: LineSink;
}

type PrimaryState =
	| {readonly name: 'running'}
	| {readonly name: 'reloading'; readonly startedAt: number}
	| {
		readonly name: 'draining';
		readonly signal: NodeJS.Signals;
		readonly startedAt: number;
		/** The workers alive when the signal came: the ones this drain answers for. */
		readonly workers: readonly WorkerRecord[];
		/** Set when the drain was cut short: at the deadline or by a second signal. */
		forced: 'deadline' | 'second-signal' | undefined;
	}
	| {readonly name: 'stopping'; readonly code: ExitCode};

const PROGRESS_INTERVAL_MS = 1000;
/**
 * How long a worker retired by a reload keeps its idle keep-alive connections
 * for their next request (answered with `Connection: close`) before closing them.
 */
const RETIRE_LINGER_MS = 1000;
/** A second signal sooner than this after the first is the same event delivered twice. */
const DUPLICATE_SIGNAL_MS = 500;
/** How long to wait, once every worker has exited, for the rest of their output. */
const OUTPUT_FLUSH_MS = 1000;
/** After SIGKILL, how long to wait for the 'exit' events before exiting anyway. */
const KILL_WAIT_MS = 2000;

const BOOTSTRAP = new URL('../worker/bootstrap.js', import.meta.url).href;

export class Primary {
	private state: PrimaryState = {name: 'running'};
	private readonly fleet: Fleet;
	private readonly timers: NodeJS.Timeout[] = [];
	private readonly done: Promise<ExitCode>;
	private resolveDone!: (code: ExitCode) => void;

	private readonly logger: Logger;

	constructor(private readonly options: PrimaryOptions, output: PrimaryOutput) {
		this.logger = output.logger;
		const {logger} = output;
		this.done = new Promise(resolve => {
			this.resolveDone = resolve;
		});
		this.fleet = new Fleet({
			script: options.script,
			args: options.args,
			// The bootstrap runs in every worker before the app: it keeps the worker
			// alive on a direct SIGTERM/SIGINT and holds the drain message for attach().
			execArgv: [...process.execArgv, ...(options.execArgv ?? []), '--import', BOOTSTRAP],
			env: {...settingsToEnv(options.settings), GRACEFUL_CLUSTER_LOG_LEVEL: options.logLevel},
			count: options.workers,
			listenTimeoutMs: options.listenTimeoutMs,
			maxStartFailures: options.maxStartFailures,
			restartDelayMs: options.restartDelayMs,
			maxRestartDelayMs: options.maxRestartDelayMs,
			backoffResetMs: options.backoffResetMs,
			logger,
			stdout: output.stdout,
			stderr: output.stderr,
		}, {
			message: (record, message) => {
				// A worker forked just before the signal may not have been listening on
				// IPC yet when the drain was broadcast (a message nobody listens for is
				// lost). Its `attached` comes after its channel opened: send the drain
				// again, with the time already spent taken off. The helper ignores a
				// second one.
				if (message.type === 'attached' && this.state.name === 'draining') {
					this.fleet.send(record, this.drainMessage());
				}
			},
			exit: () => {
				this.onWorkerExit();
			},
			giveUp: record => {
				this.giveUp(record);
			},
		});
		// At once, before anything is logged or forked: a SIGTERM during start-up
		// must drain (here: end an empty cluster with 0), not kill the primary.
		for (const signal of ['SIGTERM', 'SIGINT'] as const) {
			process.on(signal, this.onStopSignal);
		}

		process.on('SIGHUP', this.onHangup);
	}

	/** Forks the workers and resolves with the exit code once the cluster has stopped. */
	run(): Promise<ExitCode> {
		// A signal that came before this (the handlers are installed by the
		// constructor) already ended the cluster: nothing to start.
		if (this.state.name === 'running') {
			this.fleet.start();
		}

		return this.done;
	}

	private readonly onStopSignal = (signal: NodeJS.Signals): void => {
		switch (this.state.name) {
			case 'running':
			case 'reloading': {
				this.beginDrain(signal);
				break;
			}

			case 'draining': {
				// The same Ctrl-C often arrives twice within milliseconds: once from the
				// terminal to the process group and once forwarded by a wrapper such as
				// npm (clusterio/clusterio#217). Only a later one means "stop now".
				if (performance.now() - this.state.startedAt < DUPLICATE_SIGNAL_MS) {
					this.logger.info({signal}, 'repeated signal right after the first; ignoring it');
					break;
				}

				this.logger.warn({signal}, 'second signal during the drain; killing the workers now');
				this.killAll('second-signal');
				break;
			}

			case 'stopping': {
				break;
			}

			default: {
				const never: never = this.state;
				throw new Error(`unknown state ${String(never)}`);
			}
		}
	};

	private readonly onHangup = (): void => {
		// Without a listener SIGHUP would kill the primary and with it every worker.
		if (this.state.name !== 'running') {
			this.logger.warn({state: this.state.name}, `SIGHUP ignored: ${this.state.name === 'reloading' ? 'a reload is already running' : 'the cluster is shutting down'}`);
			return;
		}

		void this.reload();
	};

	/**
	 * Replaces the workers one at a time: a new worker must listen before the old
	 * one of its slot retires, so capacity never drops (pm2#3078, #1875), and the
	 * old one stops accepting at once instead of sharing new connections while it
	 * drains (pm2#5043). A replacement that fails to start ends the reload and the
	 * old workers keep serving.
	 */
	private async reload(): Promise<void> {
		const startedAt = performance.now();
		this.state = {name: 'reloading', startedAt};
		const old = this.fleet.alive
			.filter(record => record.role === 'member' && record.state.name === 'listening')
			.sort((a, b) => a.slot - b.slot);
		this.logger.info({workers: old.length}, 'reload started');
		let replaced = 0;
		for (const record of old) {
			if (record.state.name === 'exited') {
				// Crashed meanwhile: its own restart fills the slot.
				continue;
			}

			const candidate = this.fleet.forkCandidate(record.slot);
			// eslint-disable-next-line no-await-in-loop
			const listening = await this.fleet.started(candidate);
			// Read through a method: TypeScript cannot see that the await let it change.
			const now = this.stateName();
			if (now !== 'reloading') {
				// A SIGTERM came meanwhile (the drain took every worker, old and new), or
				// the cluster is stopping.
				this.logger.info({replaced, state: now}, 'reload abandoned: the cluster is shutting down');
				return;
			}

			// Read again: the old worker may have crashed while its replacement started.
			const oldCrashed = (record.state as WorkerRecord['state']).name === 'exited';
			if (!listening) {
				this.logger.error({replaced, worker: candidate.id, killedFor: candidate.killedFor, stderr: candidate.stderr.text}, 'reload failed: a new worker did not start; the old workers keep serving');
				this.state = {name: 'running'};
				if (oldCrashed) {
					// Its restart was left to the candidate, which failed.
					this.fleet.restartSlot(record.slot);
				}

				return;
			}

			this.fleet.promote(candidate);
			if (!oldCrashed) {
				this.fleet.retire(record, RETIRE_LINGER_MS, this.options.settings.gracePeriodMs);
			}

			replaced++;
		}

		this.state = {name: 'running'};
		this.logger.info({replaced, durationMs: Math.round(performance.now() - startedAt)}, 'reload finished');
	}

	private beginDrain(signal: NodeJS.Signals): void {
		const {servePeriodMs, rejectPeriodMs, gracePeriodMs} = this.options.settings;
		const startedAt = performance.now();
		const workers = this.fleet.alive;
		this.state = {name: 'draining', signal, startedAt, workers, forced: undefined};
		// The deadline first: whatever happens next, it is already set.
		this.timers.push(setTimeout(() => {
			this.logger.error({gracePeriodMs}, 'grace period over; killing the workers left');
			this.killAll('deadline');
		}, gracePeriodMs));
		this.fleet.freeze();
		this.logger.info({signal, servePeriodMs, rejectPeriodMs, gracePeriodMs, workers: workers.length}, 'drain started');
		for (const record of workers) {
			this.fleet.send(record, this.drainMessage());
		}

		// Workers whose app never called attach() get the basic drain: at the end of
		// the reject phase they are disconnected (their servers stop listening and
		// close once their connections end), and killed at the deadline.
		this.timers.push(setTimeout(() => {
			for (const record of this.fleet.alive) {
				if (!record.attached && record.worker.isConnected()) {
					this.logger.info({worker: record.id, workerPid: record.pid, state: record.state.name}, 'disconnecting a worker that did not attach graceful-cluster');
					record.worker.disconnect();
				}
			}
		}, servePeriodMs + rejectPeriodMs));
		this.timers.push(setInterval(() => {
			this.logProgress();
		}, PROGRESS_INTERVAL_MS));
		this.onWorkerExit();
	}

	/** The drain timeline as it stands now: phases already (partly) over are shortened. */
	private drainMessage(): DrainMessage {
		const {servePeriodMs, rejectPeriodMs, gracePeriodMs} = this.options.settings;
		const elapsed = this.state.name === 'draining' ? Math.round(performance.now() - this.state.startedAt) : 0;
		const serveLeft = Math.max(0, servePeriodMs - elapsed);
		const rejectEndsIn = Math.max(0, servePeriodMs + rejectPeriodMs - elapsed);
		return {type: 'drain', servePeriodMs: serveLeft, rejectPeriodMs: rejectEndsIn - serveLeft, gracePeriodMs: Math.max(0, gracePeriodMs - elapsed)};
	}

	private stateName(): PrimaryState['name'] {
		return this.state.name;
	}

	private logProgress(): void {
		const workers: Record<number, number | null> = {};
		let inflight = 0;
		for (const record of this.fleet.alive) {
			const count = record.report?.inflight;
			workers[record.id] = count ?? null;
			inflight += count ?? 0;
		}

		this.logger.info({inflight, workers}, 'drain progress');
	}

	private killAll(reason: 'deadline' | 'second-signal'): void {
		if (this.state.name === 'draining') {
			this.state.forced ??= reason;
		}

		const alive = this.fleet.alive;
		for (const record of alive) {
			this.logger.warn({worker: record.id, workerPid: record.pid, inflight: record.report?.inflight ?? null, reason}, 'killing worker');
			this.fleet.kill(record, reason);
		}

		// The 'exit' events normally finish the drain; this is the net under it.
		this.timers.push(setTimeout(() => {
			this.finish();
		}, KILL_WAIT_MS).unref());
		this.onWorkerExit();
	}

	private giveUp(record: WorkerRecord): void {
		const exit = record.state.name === 'exited' ? record.state : undefined;
		this.logger.fatal({
			worker: record.id,
			code: exit?.code,
			signal: exit?.signal,
			failures: this.options.maxStartFailures,
			killedFor: record.killedFor,
			stderr: record.stderr.text,
		}, 'the app failed to start; giving up. Its last error output is in "stderr"');
		this.stop(ExitCode.START_FAILED);
	}

	private stop(code: ExitCode): void {
		if (this.state.name === 'stopping') {
			return;
		}

		this.state = {name: 'stopping', code};
		this.fleet.freeze();
		for (const record of this.fleet.alive) {
			this.fleet.kill(record, 'start-failed');
		}

		this.timers.push(setTimeout(() => {
			this.resolve(code);
		}, KILL_WAIT_MS).unref());
		this.onWorkerExit();
	}

	private onWorkerExit(): void {
		if (this.fleet.alive.length > 0) {
			return;
		}

		if (this.state.name === 'draining') {
			this.finish();
		} else if (this.state.name === 'stopping') {
			this.resolve(this.state.code);
		}
	}

	/** The drain is over: every worker is gone, or we stopped waiting. */
	private finish(): void {
		if (this.state.name !== 'draining') {
			return;
		}

		const {startedAt, forced, signal, workers: records} = this.state;
		const lost = records.filter(record => record.state.name === 'exited' && !cleanExit(record));
		const code = forced === 'second-signal' ? ExitCode.SECOND_SIGNAL
			: forced === 'deadline' ? ExitCode.DEADLINE
				: lost.length > 0 ? ExitCode.WORKER_LOST
					: ExitCode.OK;
		let served = 0;
		let rejected = 0;
		for (const record of records) {
			served += record.report?.served ?? 0;
			rejected += record.report?.rejected ?? 0;
		}

		const summary = {
			signal,
			durationMs: Math.round(performance.now() - startedAt),
			served,
			rejected,
			outcome: code === ExitCode.OK ? 'clean' : 'forced',
			exitCode: code,
			...(lost.length > 0 ? {lost: lost.map(record => ({worker: record.id, workerPid: record.pid, inflight: record.report?.inflight ?? null, killedFor: record.killedFor ?? null}))} : {}),
		};
		if (code === ExitCode.OK) {
			this.logger.info(summary, 'drain finished');
		} else {
			this.logger.error(summary, 'drain finished');
		}

		this.state = {name: 'stopping', code};
		this.resolve(code);
	}

	private resolve(code: ExitCode): void {
		for (const timer of this.timers) {
			clearTimeout(timer);
		}

		void this.fleet.outputFlushed(OUTPUT_FLUSH_MS).then(() => {
			this.resolveDone(code);
		});
	}
}

/**
 * Exited as planned during a drain: it said it drained, or it had no helper and
 * left with code 0 after we disconnected it. A worker started before the drain
 * that crashed earlier does not count against this drain.
 */
function cleanExit(record: WorkerRecord): boolean {
	if (record.state.name !== 'exited') {
		return true;
	}

	const {before, code, signal} = record.state;
	if (before.name === 'drained') {
		return true;
	}

	return !record.attached && record.killedFor === undefined && code === 0 && signal === null;
}
