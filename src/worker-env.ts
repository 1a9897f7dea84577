/**
 * The environment the primary hands each worker at fork, both ends in one
 * place: `workerEnv()` writes what `readWorkerEnv()` reads back. Each value
 * goes under its option's own variable in the option's own syntax, so a
 * graceful-cluster CLI the app starts itself reads them as valid options. The
 * timeline is not here: it travels in the drain message alone. Loaded into
 * every worker before the app's first line: no yargs, no prom-client.
 */
import {parseDuration} from './duration.js';
import {UsageError} from './errors.js';
import {isLogLevel, LOG_LEVELS, type LogLevel} from './logger.js';
import {DEFAULT_LOG_LEVEL, envName, workerSettingsToEnv, type WorkerSettings} from './settings.js';

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

export const replacementEnv: Readonly<Record<string, string>> = {[WORKER_ENV.replacement]: 'on'};

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

export interface HeartbeatOptions {
	/** 0: off; the heartbeat is sent either way, for recycling and metrics. */
	readonly workerTimeoutMs: number;
	/** Start the watchdog thread that captures a blocked loop's stack (about 10 MB RSS). */
	readonly captureStack: boolean;
}

/** What a worker reads back; the worker settings apart (`workerSettingsFromEnv`: they can be malformed). */
export interface WorkerEnv {
	/** Unchecked: `logLevelFromEnv` names a bad one, where a user wrote it (standalone mode). */
	readonly logLevel: string;
	readonly heartbeat: HeartbeatOptions;
	readonly autoAttach: boolean;
	/** How long a drain that reaches the worker before it listens waits for that, from its start; 0: not at all. */
	readonly listenTimeoutMs: number;
	readonly replacement: boolean;
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

/** `GRACEFUL_CLUSTER_LOG_LEVEL` as the worker helper reads it; the CLI checks its own flag. */
export function logLevelFromEnv(env: Record<string, string | undefined>): LogLevel {
	const level = readWorkerEnv(env).logLevel;
	if (!isLogLevel(level)) {
		throw new UsageError(`${WORKER_ENV.logLevel}: "${level}" is not a level. Use one of ${LOG_LEVELS.join(', ')}.`);
	}

	return level;
}
