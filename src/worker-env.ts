/**
 * The environment the primary hands each worker at fork, both ends in one
 * place: what `workerEnv()` puts in it (primary/index.ts) is what
 * `readWorkerEnv()` reads back (worker/bootstrap.ts, worker/heartbeat.ts).
 *
 *   the worker settings  settings.ts' own variables; read back by `workerSettingsFromEnv`
 *   the log level        GRACEFUL_CLUSTER_LOG_LEVEL
 *   the heartbeat        GRACEFUL_CLUSTER_WORKER_TIMEOUT, GRACEFUL_CLUSTER_HUNG_STACK
 *   which servers        GRACEFUL_CLUSTER_AUTO_ATTACH
 *   a start's bound      GRACEFUL_CLUSTER_LISTEN_TIMEOUT (how long a drain waits for an app still starting)
 *   the worker's role    GRACEFUL_CLUSTER_REPLACEMENT, set for one fork only (`replacementEnv`)
 *   the peers' rates     GRACEFUL_CLUSTER_PEER_RATES (worker/arrivals.ts)
 *
 * Each goes under its option's own variable and in the option's own syntax, so
 * a graceful-cluster CLI the app starts itself reads them as valid options; the
 * two that are no option's (INTERNAL_VARIABLES) it passes over. The
 * timeline is not here: it travels in the drain message alone (timeline.ts).
 * Loaded into every worker before the app's first line: no yargs, no
 * prom-client.
 */
import {parseDuration} from './duration.js';
import {UsageError} from './errors.js';
import {isLogLevel, LOG_LEVELS, type LogLevel} from './logger.js';
import {DEFAULT_LOG_LEVEL, envName, workerSettingsToEnv, type WorkerSettings} from './settings.js';

/** The variables beside the worker settings' own. */
export const WORKER_ENV = {
	logLevel: envName('log-level'),
	workerTimeout: envName('worker-timeout'),
	hungStack: envName('hung-stack'),
	autoAttach: envName('auto-attach'),
	listenTimeout: envName('listen-timeout'),
	/** Not an option: `on` in a reload's or a recycle's replacement (worker/warmup.ts). */
	replacement: 'GRACEFUL_CLUSTER_REPLACEMENT',
	/** Not an option: `off` when nothing reads the peers' rates before a signal (worker/arrivals.ts). */
	peerRates: 'GRACEFUL_CLUSTER_PEER_RATES',
} as const;

/** The variables that are no option's: the command line passes over them. */
export const INTERNAL_VARIABLES: ReadonlySet<string> = new Set([WORKER_ENV.replacement, WORKER_ENV.peerRates]);

/**
 * What a replacement is forked with beside `workerEnv()`: it warms up before
 * it takes connections (worker/warmup.ts). Per fork, so not in `workerEnv()`.
 */
export const replacementEnv: Readonly<Record<string, string>> = {[WORKER_ENV.replacement]: 'on'};

/** What the primary tells its workers: a part of its options (primary/options.ts). */
export interface WorkerEnvOptions {
	readonly settings: WorkerSettings;
	readonly logLevel: string;
	readonly workerTimeoutMs: number;
	readonly hungStack: boolean;
	readonly autoAttach: boolean;
	readonly listenTimeoutMs: number;
	/** The two readers of the peers' rates (worker/arrivals.ts). */
	readonly adaptiveReject: boolean;
	readonly metrics?: unknown;
}

/** The heartbeat's settings (worker/heartbeat.ts). */
export interface HeartbeatOptions {
	/**
	 * The primary's `--worker-timeout`; 0: off. The heartbeat is sent either way:
	 * recycling and metrics read it too.
	 */
	readonly workerTimeoutMs: number;
	/** Start the watchdog thread that captures a blocked loop's stack (about 10 MB RSS). */
	readonly captureStack: boolean;
}

/** What a worker reads back; the worker settings apart (`workerSettingsFromEnv`: they can be malformed). */
export interface WorkerEnv {
	/** Unchecked: `logLevelFromEnv` names a bad one, where a user wrote it (standalone mode). */
	readonly logLevel: string;
	readonly heartbeat: HeartbeatOptions;
	/** Every HTTP server the worker listens on is drained, not only those passed to attach(). */
	readonly autoAttach: boolean;
	/** `--listen-timeout`: a drain that reaches the worker before it listens waits for that at most this long from its start; 0: not at all. */
	readonly listenTimeoutMs: number;
	/** Forked to replace a worker (a reload, a recycle): it warms up first. */
	readonly replacement: boolean;
	/** Count each peer's requests while serving (worker/arrivals.ts). */
	readonly peerRates: boolean;
}

export function workerEnv(options: WorkerEnvOptions): Record<string, string> {
	return {
		...workerSettingsToEnv(options.settings),
		[WORKER_ENV.logLevel]: options.logLevel,
		[WORKER_ENV.workerTimeout]: `${options.workerTimeoutMs}ms`,
		[WORKER_ENV.hungStack]: options.hungStack ? 'on' : 'off',
		[WORKER_ENV.autoAttach]: options.autoAttach ? 'on' : 'off',
		[WORKER_ENV.listenTimeout]: `${options.listenTimeoutMs}ms`,
		// Read by the adaptive reject period's rule, and shown by /status (--metrics) in a drain.
		[WORKER_ENV.peerRates]: options.adaptiveReject || options.metrics !== undefined ? 'on' : 'off',
	};
}

export function readWorkerEnv(env: Record<string, string | undefined>): WorkerEnv {
	return {
		logLevel: env[WORKER_ENV.logLevel] ?? DEFAULT_LOG_LEVEL,
		heartbeat: {
			// Absent (a primary of another version): no watchdog.
			workerTimeoutMs: parseDuration(env[WORKER_ENV.workerTimeout] ?? '0') ?? 0,
			captureStack: env[WORKER_ENV.hungStack] === 'on',
		},
		autoAttach: env[WORKER_ENV.autoAttach] !== 'off',
		// Absent (a primary of another version): the drain does not wait for a listen.
		listenTimeoutMs: parseDuration(env[WORKER_ENV.listenTimeout] ?? '0') ?? 0,
		replacement: env[WORKER_ENV.replacement] === 'on',
		// Absent (a primary of another version): counted, as that primary may read them.
		peerRates: env[WORKER_ENV.peerRates] !== 'off',
	};
}

/**
 * `GRACEFUL_CLUSTER_LOG_LEVEL` as the worker helper reads it (the CLI checks
 * its own flag): a value that is not a level is a usage error naming the
 * variable.
 */
export function logLevelFromEnv(env: Record<string, string | undefined>): LogLevel {
	const level = readWorkerEnv(env).logLevel;
	if (!isLogLevel(level)) {
		throw new UsageError(`${WORKER_ENV.logLevel}: "${level}" is not a level. Use one of ${LOG_LEVELS.join(', ')}.`);
	}

	return level;
}
