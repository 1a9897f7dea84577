/**
 * The primary: owns the workers and the shutdown timeline. It wires the rooms
 * of the primary together and holds the cluster's one state:
 *
 *   running --SIGTERM/SIGINT/SIGQUIT--> draining --every worker gone / deadline--> stopped
 *   running --SIGHUP/SIGUSR2--> reloading --every worker replaced / a replacement failed--> running
 *   reloading --SIGTERM/SIGINT/SIGQUIT--> draining (the reload is aborted; the drain takes every
 *                                         worker, and the retired workers' deadlines become its own)
 *   running | reloading --the app cannot start--> stopping --every worker gone / KILL_WAIT_MS--> stopped
 *                                                 (a reload is aborted)
 *
 * `stopped` keeps the drain for /status, which names it `stopping` too; `run()`
 * resolves with the exit code once the workers' last output is in.
 */
import {TimerGroup} from '../clock.js';
import {formatDuration} from '../duration.js';
import {ExitCode} from '../exit-codes.js';
import type {Logger} from '../logger.js';
import {ClusterDrain, KILL_WAIT_MS} from './drain.js';
import {realEdges, type ProcessEdges} from './edges.js';
import {Fleet} from './fleet.js';
import type {MetricsAddress, PrimaryOptions} from './options.js';
import type {LineSink} from './output.js';
import {Recycler} from './recycle.js';
import {reload, Replacer, type ReloadResult} from './reload.js';
import type {ClusterState, ClusterView} from './status.js';
import {Watchdog} from './watchdog.js';
import {HANDLED_SIGNALS, SIGNAL_ACTIONS, type HandledSignal} from '../signals.js';
import {Supervisor} from './supervisor.js';
import {Notices} from './notices.js';
import {killReason, type WorkerRecord} from './worker-record.js';
import {workerEnv} from '../worker-env.js';
import {bootstrapPreload} from '../package-files.js';
import {StrandedConnections} from './stranded.js';
import {ClusterShedding} from './shedding.js';

export interface PrimaryOutput {
	readonly logger: Logger;
	/** The writers the logger uses; the workers' lines are forwarded through them too. */
	readonly stdout: LineSink;
	readonly stderr: LineSink;
}

type PrimaryState =
	/** Made, `run()` not called yet: no worker has started. */
	| {readonly name: 'created'}
	| {readonly name: 'running'}
	| {readonly name: 'reloading'; readonly abort: AbortController}
	| {readonly name: 'draining'; readonly drain: ClusterDrain}
	/** The app cannot start: what runs is killed; waiting for it to be gone. */
	| {readonly name: 'stopping'; readonly code: ExitCode}
	| {readonly name: 'stopped'; readonly drain: ClusterDrain | undefined};

/** The state as /status and the logs name it (see the header). */
const shownName = (state: PrimaryState): ClusterState => state.name === 'stopped' ? 'stopping' : state.name === 'created' ? 'running' : state.name;

/** How long a retired worker keeps its idle keep-alive connections for their next request. */
export const RETIRE_LINGER_MS = 1000;
/** How long to wait, once every worker has exited, for the rest of their output. */
const OUTPUT_FLUSH_MS = 1000;

export class Primary {
	private state: PrimaryState = {name: 'created'};
	private readonly fleet: Fleet;
	private readonly supervisor: Supervisor;
	private readonly replacer: Replacer;
	private readonly watchdog: Watchdog;
	private readonly recycler: Recycler;
	private readonly timers: TimerGroup;
	/** Retired workers' deadlines: a drain clears them, its own deadline covering those workers. */
	private readonly retireDeadlines: TimerGroup;
	/** Aborted once the cluster begins to stop: replacements (recycles) still starting complete nothing. */
	private readonly shutdown = new AbortController();
	private readonly logger: Logger;
	private readonly done: Promise<ExitCode>;
	private resolveDone!: (code: ExitCode) => void;
	private readonly reloads: Record<ReloadResult['kind'], number> = {finished: 0, failed: 0, abandoned: 0};
	private readonly startedAt: number;
	private readonly notices: Notices;
	private readonly stranded: StrandedConnections;

	constructor(private readonly options: PrimaryOptions, output: PrimaryOutput, private readonly edges: ProcessEdges = realEdges) {
		const {logger} = output;
		this.logger = logger;
		this.timers = new TimerGroup(edges.clock);
		this.retireDeadlines = new TimerGroup(edges.clock);
		this.startedAt = edges.clock.now();
		this.done = new Promise(resolve => {
			this.resolveDone = resolve;
		});
		this.fleet = new Fleet({
			script: options.script,
			args: options.args,
			cwd: options.cwd,
			// The bootstrap runs in every worker before the app: it keeps the worker
			// alive on a direct SIGTERM/SIGINT and holds the drain message for attach().
			execArgv: [...process.execArgv, ...(options.execArgv ?? []), ...bootstrapPreload()],
			env: workerEnv(options),
			logger,
			stdout: output.stdout,
			stderr: output.stderr,
		}, edges);
		this.supervisor = new Supervisor(this.fleet, {
			count: options.workers,
			listenTimeoutMs: options.listenTimeoutMs,
			maxStartFailures: options.maxStartFailures,
			restartDelayMs: options.restartDelayMs,
			maxRestartDelayMs: options.maxRestartDelayMs,
			backoffResetMs: options.backoffResetMs,
		}, edges.clock, logger, record => {
			this.giveUp(record);
		});
		this.replacer = new Replacer({
			fleet: this.fleet,
			supervisor: this.supervisor,
			logger,
			timers: this.retireDeadlines,
			lingerMs: RETIRE_LINGER_MS,
			deadlineMs: options.settings.gracePeriodMs,
			listenTimeoutMs: options.listenTimeoutMs,
			shutdown: this.shutdown.signal,
		});
		this.watchdog = new Watchdog(this.fleet, options, this.timers, logger);
		// Only while running: a reload replaces every worker anyway, a drain takes them all.
		this.recycler = new Recycler(this.fleet, this.replacer, options, edges.clock, logger, () => this.state.name === 'running');
		this.fleet.on('message', (record, message) => {
			if (message.type === 'notice') {
				this.notices.tell(record, message.code);
			}
		});
		this.fleet.on('gone', () => {
			if (this.state.name === 'stopping' && this.fleet.alive.length === 0) {
				this.end(this.state.code);
			}
		});
		this.notices = new Notices(options.workers, logger);
		if (options.settings.maxEventLoopDelayMs > 0) {
			// Its listeners keep it: nothing else needs to hold it.
			new ClusterShedding(this.fleet); // eslint-disable-line no-new
		}

		this.stranded = new StrandedConnections(options.settings.retryAfterSeconds, logger);
		edges.cluster.onStranded(handle => {
			this.stranded.answer(handle, this.state.name === 'draining' ? this.state.drain : undefined);
		});
		// Before anything is forked: a SIGTERM during start-up (held by cli.ts until
		// now) must drain (here: end an empty cluster with 0), not kill the primary.
		for (const signal of HANDLED_SIGNALS) {
			edges.onSignal(signal, this.onSignal);
		}
	}

	/** Forks the workers and resolves with the exit code once the cluster has stopped. */
	run(): Promise<ExitCode> {
		// A signal that came before this (the handlers are installed by the
		// constructor) already ended the cluster: nothing to start.
		if (this.state.name === 'created') {
			this.state = {name: 'running'};
			this.supervisor.start();
			this.watchdog.start();
		}

		return this.done;
	}

	/** False once a signal that came before `run()` has ended the cluster: it will start no worker. */
	get startsWorkers(): boolean {
		return this.state.name === 'created';
	}

	get view(): ClusterView {
		const {state} = this;
		return {
			state: shownName(state),
			drain: state.name === 'draining' || state.name === 'stopped' ? state.drain : undefined,
			reloads: this.reloads,
			options: this.options,
			fleet: this.fleet,
			clock: this.edges.clock,
			startedAt: this.startedAt,
		};
	}

	/** Call before `run()`: an address that cannot be bound is a UsageError (exit 2) before any worker starts. */
	async serveMetrics(address: MetricsAddress): Promise<void> {
		const {serveMetrics} = await import('./metrics-server.js');
		await serveMetrics(address, () => this.view, this.logger);
	}

	private readonly onSignal = (signal: NodeJS.Signals): void => {
		const action = SIGNAL_ACTIONS[signal as HandledSignal];
		switch (action) {
			case 'drain': {
				this.onStop(signal);
				break;
			}

			case 'reload': {
				this.onReload(signal);
				break;
			}

			case 'ignore': {
				// Its default would kill every worker and every request in flight.
				this.logger.warn({signal}, `${signal} ignored: graceful-cluster drains on SIGTERM, SIGINT or SIGQUIT and reloads on SIGHUP or SIGUSR2`);
				break;
			}

			default: {
				const never: never = action;
				throw new Error(`no action for ${String(never)}`);
			}
		}
	};

	private onStop(signal: NodeJS.Signals): void {
		switch (this.state.name) {
			// While the CLI was loading, say (main.ts hands such signals over): a
			// drain of no worker would report a reject phase that never ran.
			case 'created': {
				this.logger.info({signal}, 'signal received before any worker started: nothing to drain; exiting');
				this.end(ExitCode.OK);
				break;
			}

			case 'reloading': {
				this.state.abort.abort();
				this.beginDrain(signal);
				break;
			}

			case 'running': {
				this.beginDrain(signal);
				break;
			}

			case 'draining': {
				this.state.drain.onSignal(signal);
				break;
			}

			case 'stopping':
			case 'stopped': {
				break;
			}

			default: {
				const never: never = this.state;
				throw new Error(`unknown state ${String(never)}`);
			}
		}
	}

	private onReload(signal: NodeJS.Signals): void {
		if (this.state.name !== 'running') {
			const why = this.state.name === 'reloading' ? 'a reload is already running' : this.state.name === 'created' ? 'no worker has started yet (the ones about to start load the app as it is now)' : 'the cluster is shutting down';
			this.logger.warn({state: shownName(this.state)}, `${signal} ignored: ${why}`);
			return;
		}

		const abort = new AbortController();
		this.state = {name: 'reloading', abort};
		void reload({
			fleet: this.fleet,
			replacer: this.replacer,
			logger: this.logger,
			timers: this.timers,
			signal: abort.signal,
			by: signal,
		}).then(result => {
			this.reloads[result.kind]++;
			if (this.state.name === 'reloading' && this.state.abort === abort) {
				this.state = {name: 'running'};
			}
		});
	}

	private beginDrain(signal: NodeJS.Signals): void {
		const {servePeriodMs, rejectPeriodMs, gracePeriodMs} = this.options.settings;
		this.supervisor.freeze();
		this.shutdown.abort();
		this.retireDeadlines.clearAll();
		const drain = new ClusterDrain({
			fleet: this.fleet,
			timeline: {servePeriodMs, rejectPeriodMs, gracePeriodMs},
			clock: this.edges.clock,
			logger: this.logger,
			adaptiveReject: this.options.adaptiveReject,
			listenTimeoutMs: this.options.listenTimeoutMs,
			onFinished: code => {
				this.end(code);
			},
		}, signal);
		this.state = {name: 'draining', drain};
		drain.start();
	}

	private giveUp(record: WorkerRecord): void {
		const {state} = record;
		const metricsPort = this.options.metrics?.port;
		// The app tried to listen on the port the primary serves /metrics on: a usage error, named as such.
		if (metricsPort !== undefined && record.stderr.text.some(line => line.includes('EADDRINUSE') && new RegExp(`[:\\s]${metricsPort}\\b`).test(line))) {
			this.logger.fatal({worker: record.id, port: metricsPort, stderr: record.stderr.text}, 'the app listens on the --metrics port; give --metrics another port');
			this.stop(ExitCode.USAGE);
			return;
		}

		const killedFor = killReason(state);
		const fields = {worker: record.id, code: state.name === 'gone' ? state.code : undefined, signal: state.name === 'gone' ? state.signal : undefined, failures: this.options.maxStartFailures, killedFor, stderr: record.stderr.text};
		// Not a crash (its stderr is often empty): a queue consumer never listens.
		if (killedFor === 'listen-timeout') {
			this.logger.fatal({...fields, listenTimeoutMs: this.options.listenTimeoutMs}, `the app never listened within --listen-timeout ${formatDuration(this.options.listenTimeoutMs)}, ${this.options.maxStartFailures} times in a row; giving up. If it serves no HTTP (a queue consumer, a scheduler), run it with --listen-timeout 0`);
		} else {
			this.logger.fatal(fields, 'the app failed to start; giving up. Its last error output is in "stderr"');
		}

		this.stop(ExitCode.START_FAILED);
	}

	/** Ends the cluster without a drain (the app cannot start): kill what runs. */
	private stop(code: ExitCode): void {
		switch (this.state.name) {
			case 'reloading': {
				this.state.abort.abort();
				break;
			}

			case 'created':
			case 'running': {
				break;
			}

			// The supervisor is frozen from a drain on: it gives up only while running or reloading.
			case 'draining':
			case 'stopping':
			case 'stopped': {
				return;
			}

			default: {
				const never: never = this.state;
				throw new Error(`unknown state ${String(never)}`);
			}
		}

		this.state = {name: 'stopping', code};
		this.supervisor.freeze();
		this.shutdown.abort();
		this.retireDeadlines.clearAll();
		for (const record of this.fleet.alive) {
			this.fleet.kill(record, 'start-failed');
		}

		this.timers.timeout(() => {
			this.end(code);
		}, KILL_WAIT_MS);
		if (this.fleet.alive.length === 0) {
			this.end(code);
		}
	}

	/** The cluster has stopped: nothing of ours may fire any more; `run()` resolves once the workers' last output is in. */
	private end(code: ExitCode): void {
		if (this.state.name === 'stopped') {
			return;
		}

		this.state = {name: 'stopped', drain: this.state.name === 'draining' ? this.state.drain : undefined};
		this.timers.clearAll();
		this.fleet.close();
		this.retireDeadlines.clearAll();
		// The last stranded connections, taken as the last worker closed its port, are still being answered.
		void Promise.all([this.fleet.outputFlushed(OUTPUT_FLUSH_MS), this.stranded.answered]).then(() => {
			this.resolveDone(code);
		});
	}
}
