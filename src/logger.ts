/**
 * JSON lines on stdout, one logger per process, marked with its role so the
 * primary's and the workers' lines can be told apart in one container log.
 *
 * pino writes synchronously to stdout by default, which is what we want: the
 * last lines before `process.exit` (the drain summary) must not be lost.
 *
 * pino itself loads when a logger is made (pino.ts), or, for a worker's
 * (`createLazyLogger`), at its first line: most workers log nothing until the
 * drain, and loading pino is half of what the bootstrap costs each worker's start.
 */
import {UsageError} from './errors.js';
import {loadPino} from './pino.js';
import {readWorkerEnv, WORKER_ENV} from './worker-env.js';
import type {DestinationStream, Logger, LevelWithSilent} from 'pino';

export type {Logger} from 'pino';

export const LOG_LEVELS: readonly LevelWithSilent[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

export interface LoggerOptions {
	readonly role: 'primary' | 'worker' | 'standalone';
	readonly level: string;
	readonly workerId?: number | undefined;
	/** Where lines go; stdout, synchronously, unless given. */
	readonly destination?: DestinationStream | undefined;
}

/**
 * A synchronous writer for a file descriptor. The primary writes its own log
 * lines and the workers' forwarded lines through one such writer per stream, so
 * a line can never land inside another that is still being written.
 */
/**
 * Synchronous, in buffer mode: pino's lines are strings, the workers' output
 * passed through (primary/output.ts) is bytes, written as they are.
 */
export const syncWriter = (fd: 1 | 2): DestinationStream & {write(data: string | Buffer): unknown} => loadPino().destination({dest: fd, sync: true, contentMode: 'buffer'});

export function createLogger({role, level, workerId, destination}: LoggerOptions): Logger {
	return loadPino()({
		level,
		base: workerId === undefined ? {role, pid: process.pid} : {role, pid: process.pid, worker: workerId},
		// Level names instead of numbers: people read these in `kubectl logs`.
		formatters: {level: label => ({level: label})},
	}, destination ?? syncWriter(1));
}

/** pino's numbers for its levels (a logger's `levels.values`, where `silent` is there too, unlisted). */
const LEVEL_VALUES: Readonly<Record<string, number>> = {trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Number.POSITIVE_INFINITY};

/**
 * `createLogger(options)`, made at its first use: what is asked of it first
 * loads pino. `isLevelEnabled()` is answered without it, as pino answers it
 * (a known level at or above the logger's), since attach() asks it at once.
 * A level pino would not know makes the logger at once, to throw where it did.
 */
export function createLazyLogger(options: LoggerOptions): Logger {
	if (!(LOG_LEVELS as readonly string[]).includes(options.level)) {
		return createLogger(options);
	}

	let logger: Logger | undefined;
	const threshold = LEVEL_VALUES[options.level]!;
	const isLevelEnabled = (level: string): boolean => Object.hasOwn(LEVEL_VALUES, level) && LEVEL_VALUES[level]! >= threshold;
	// Each method bound once: a drain at `debug` logs a line per rejected request.
	const bound = new Map<string | symbol, {method: unknown; call: unknown}>();
	return new Proxy({} as Logger, {
		get(_target, key) {
			if (logger === undefined && key === 'isLevelEnabled') {
				return isLevelEnabled;
			}

			logger ??= createLogger(options);
			const value: unknown = Reflect.get(logger, key, logger);
			if (typeof value !== 'function') {
				return value;
			}

			// Keyed by the method too: pino swaps a level's method when the level changes.
			let entry = bound.get(key);
			if (entry?.method !== value) {
				entry = {method: value, call: value.bind(logger)};
				bound.set(key, entry);
			}

			return entry.call;
		},
	});
}

/**
 * `GRACEFUL_CLUSTER_LOG_LEVEL` as the worker helper reads it (the CLI checks
 * its own flag): a value pino does not know is a usage error naming the
 * variable, not a crash inside pino.
 */
export function logLevelFromEnv(env: Record<string, string | undefined>): string {
	const level = readWorkerEnv(env).logLevel;
	if (!(LOG_LEVELS as readonly string[]).includes(level)) {
		throw new UsageError(`${WORKER_ENV.logLevel}: "${level}" is not a level. Use one of ${LOG_LEVELS.join(', ')}.`);
	}

	return level;
}
