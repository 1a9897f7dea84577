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
 *
 * Synchronous, in buffer mode: pino's lines are strings, the workers' output
 * passed through (primary/output.ts) is bytes, written as they are. pino's
 * writer, made at the first write: the primary's first write comes after its
 * workers are forked (createHeldLogger).
 */
export function syncWriter(fd: 1 | 2): DestinationStream & {write(data: string | Buffer): unknown} {
	let writer: DestinationStream | undefined;
	return {
		write(data) {
			writer ??= loadPino().destination({dest: fd, sync: true, contentMode: 'buffer'});
			return writer.write(data as string);
		},
	};
}

/** The time a held line was logged at, while createHeldLogger() writes it. */
let heldTime: number | undefined;

export function createLogger({role, level, workerId, destination}: LoggerOptions): Logger {
	return loadPino()({
		level,
		base: workerId === undefined ? {role, pid: process.pid} : {role, pid: process.pid, worker: workerId},
		// Level names instead of numbers: people read these in `kubectl logs`.
		formatters: {level: label => ({level: label})},
		// pino's own (epoch milliseconds), but a held line keeps the time it was logged at.
		timestamp: () => `,"time":${heldTime ?? Date.now()}`,
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

type LevelMethod = Exclude<LevelWithSilent, 'silent'>;
const LEVEL_METHODS: ReadonlySet<string> = new Set<LevelMethod>(['trace', 'debug', 'info', 'warn', 'error', 'fatal']);

/**
 * A logger that holds its lines until `release()`, then writes them in order,
 * each with the time it was logged at, and writes straight on from there: pino
 * loads at the release, not before. The primary's (main.ts): it forks its
 * workers first, so loading pino (about 10 ms) runs beside their start instead
 * of ahead of it. An error or a fatal line releases at once, and so does the
 * process's exit: nothing held is lost.
 */
export function createHeldLogger(options: LoggerOptions): {readonly logger: Logger; release(): void} {
	const real = createLazyLogger(options);
	const held: Array<{readonly level: LevelMethod; readonly args: unknown[]; readonly time: number}> = [];
	let released = false;
	const write = (level: LevelMethod, args: unknown[]): void => {
		(real[level] as (...args: unknown[]) => void)(...args);
	};

	const release = (): void => {
		if (released) {
			return;
		}

		released = true;
		process.off('exit', release);
		for (const {level, args, time} of held.splice(0)) {
			heldTime = time;
			try {
				write(level, args);
			} finally {
				heldTime = undefined;
			}
		}
	};

	const hold = new Map([...LEVEL_METHODS].map(level => [level, (...args: unknown[]): void => {
		if (!released && level !== 'error' && level !== 'fatal') {
			held.push({level: level as LevelMethod, args, time: Date.now()});
			return;
		}

		release();
		write(level as LevelMethod, args);
	}]));
	process.on('exit', release);
	const logger = new Proxy({} as Logger, {
		get(_target, key) {
			if (!released && typeof key === 'string' && hold.has(key)) {
				return hold.get(key);
			}

			if (!released && key === 'isLevelEnabled') {
				return real.isLevelEnabled;
			}

			release();
			return Reflect.get(real, key, real);
		},
	});
	return {logger, release};
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
