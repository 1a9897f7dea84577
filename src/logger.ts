/**
 * JSON lines on stdout, one logger per process, marked with its role:
 *
 *     {"level":"info","time":1764600000000,"role":"worker","pid":42,"worker":1,"inflight":3,"msg":"drain started"}
 *
 * The lines are pino's, so what reads pino's lines reads ours, pino-pretty
 * included; the writer is our own: pino and the built-ins it loads cost the
 * primary about 30 ms of CPU at its start (bench/startup.js), and every worker
 * as much at its drain's first line. Each line is one synchronous `write`: the
 * last lines before `process.exit` are never lost, and none lands inside another.
 */
import {writeSync} from 'node:fs';

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = typeof LOG_LEVELS[number];
type LevelMethod = Exclude<LogLevel, 'silent'>;

/** pino's numbers for its levels: a line is written when its level's is at or above the logger's. */
const LEVEL_VALUES: Readonly<Record<LogLevel, number>> = {trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Number.POSITIVE_INFINITY};

export interface LogFn {
	(fields: object, msg?: string): void;
	(msg: string): void;
}

export type Logger = Readonly<Record<LevelMethod, LogFn>> & {
	readonly level: LogLevel;
	isLevelEnabled(level: string): boolean;
};

/** Where lines go: anything that takes one whole line per synchronous `write`. */
export interface LineDestination {
	write(line: string): unknown;
}

export interface LoggerOptions {
	readonly role: 'primary' | 'worker' | 'standalone';
	readonly level: string;
	readonly workerId?: number | undefined;
	readonly destination?: LineDestination | undefined;
}

export function isLogLevel(level: string): level is LogLevel {
	return Object.hasOwn(LEVEL_VALUES, level);
}

/** For `Atomics.wait`, the one way to sleep synchronously. */
const SLEEP = new Int32Array(new SharedArrayBuffer(4));
/** How long a write waits for a full pipe to drain before it tries again. */
const FULL_PIPE_WAIT_MS = 10;

/**
 * A synchronous writer for a file descriptor, one per stream for the primary's
 * lines and the workers' forwarded output (primary/output.ts).
 *
 * A descriptor another process set non-blocking (a pipe it shares) answers a
 * full pipe with EAGAIN: the write waits a moment and goes on, dropping
 * nothing. Any other error drops the write, and EPIPE all that follow: a
 * primary that threw here would take its serving workers down with it over a
 * log line (ENOSPC under a redirected stdout).
 */
export function syncWriter(fd: 1 | 2): LineDestination & {write(data: string | Buffer): unknown} {
	let readerGone = false;
	return {
		write(data) {
			if (readerGone) {
				return true;
			}

			const bytes = typeof data === 'string' ? Buffer.from(data) : data;
			let offset = 0;
			while (offset < bytes.length) {
				try {
					offset += writeSync(fd, bytes, offset);
				} catch (error) {
					const {code} = error as NodeJS.ErrnoException;
					if (code === 'EAGAIN') {
						Atomics.wait(SLEEP, 0, 0, FULL_PIPE_WAIT_MS);
					} else {
						readerGone = code === 'EPIPE';
						return true;
					}
				}
			}

			return true;
		},
	};
}

export function createLogger({role, level, workerId, destination = syncWriter(1)}: LoggerOptions): Logger {
	if (!isLogLevel(level)) {
		throw new Error(`unknown level ${level}`);
	}

	// The fields every line carries, after its level and time (pino's `base`).
	const base = JSON.stringify(workerId === undefined ? {role, pid: process.pid} : {role, pid: process.pid, worker: workerId}).slice(1, -1);
	const threshold = LEVEL_VALUES[level];
	const isLevelEnabled = (asked: string): boolean => isLogLevel(asked) && LEVEL_VALUES[asked] >= threshold;
	const method = (name: LevelMethod): LogFn => {
		if (LEVEL_VALUES[name] < threshold) {
			return noop;
		}

		const head = `{"level":"${name}","time":`;
		return (first: object | string, msg?: string): void => {
			destination.write(`${head}${Date.now()},${base}${lineEnd(first, msg)}`);
		};
	};

	return {
		level,
		isLevelEnabled,
		trace: method('trace'),
		debug: method('debug'),
		info: method('info'),
		warn: method('warn'),
		error: method('error'),
		fatal: method('fatal'),
	};
}

function noop(): void {}

/** pino's word for a value it could not write. */
const UNSERIALIZABLE = '"[unable to serialize, circular reference is too complex to analyze]"';

/**
 * As pino: an error given alone is the line's `err`, and its message the
 * line's `msg` when none is given. Never throws: a log call must not take down
 * what it reports on (a hook's error whose `toJSON` throws).
 */
function lineEnd(first: object | string, givenMsg: string | undefined): string {
	let fields: object | undefined;
	let msg = givenMsg;
	if (typeof first === 'string') {
		msg = first;
	} else if (first instanceof Error) {
		fields = {err: first};
		msg ??= first.message;
	} else {
		fields = first;
		const err = (first as {err?: unknown}).err;
		if (msg === undefined && err instanceof Error) {
			msg = err.message;
		}
	}

	let text = '';
	if (fields !== undefined) {
		// As pino: what JSON has no value for (undefined, a function) is left out.
		for (const key in fields) {
			let json: string | undefined;
			try {
				const raw = (fields as Readonly<Record<string, unknown>>)[key];
				const value = key === 'err' ? serializeError(raw) : raw;
				json = value === undefined || typeof value === 'function' || typeof value === 'symbol' ? undefined : stringify(value);
			} catch {
				json = UNSERIALIZABLE;
			}

			if (json !== undefined) {
				text += `,${JSON.stringify(key)}:${json}`;
			}
		}
	}

	return msg === undefined ? `${text}}\n` : `${text},"msg":${JSON.stringify(String(msg))}}\n`;
}

/**
 * JSON even of what JSON.stringify refuses, as pino writes it then: a circular
 * reference is "[Circular]", a BigInt its digits, and object keys are sorted.
 */
function stringify(value: unknown): string | undefined {
	try {
		return JSON.stringify(value);
	} catch {
		// The objects being written, innermost last, each with the sorted copy written in its place.
		const path: Array<{readonly original: object; readonly copy: object}> = [];
		return JSON.stringify(value, function (this: unknown, _key, inner: unknown) {
			if (typeof inner === 'bigint') {
				return Number.isSafeInteger(Number(inner)) ? Number(inner) : inner.toString();
			}

			if (typeof inner !== 'object' || inner === null) {
				return inner;
			}

			while (path.length > 0 && path.at(-1)!.copy !== this) {
				path.pop();
			}

			if (path.some(entry => entry.original === inner)) {
				return '[Circular]';
			}

			const copy = Array.isArray(inner) ? inner : Object.fromEntries(Object.keys(inner).sort().map(name => [name, (inner as Record<string, unknown>)[name]]));
			path.push({original: inner, copy});
			return copy;
		});
	}
}

type ErrorLike = Error & {errors?: unknown; cause?: unknown};

function isErrorLike(value: unknown): value is ErrorLike {
	return typeof value === 'object' && value !== null && typeof (value as {message?: unknown}).message === 'string';
}

/** An error's cause, if it is an error: `cause`, or VError's `cause()`. */
function causeOf(error: ErrorLike): ErrorLike | undefined {
	const cause = typeof error.cause === 'function' ? (error.cause as () => unknown)() : error.cause;
	return isErrorLike(cause) ? cause : undefined;
}

/** The messages of an error and its causes, as pino joins them: `outer: inner` (a VError's message has its causes' already). */
function messageWithCauses(error: ErrorLike): string {
	let text = error.message || '';
	const seen = new Set<ErrorLike>([error]);
	for (let current = error, cause = causeOf(error); cause !== undefined; current = cause, cause = causeOf(cause)) {
		const vErrorStyle = typeof current.cause === 'function';
		if (seen.has(cause)) {
			text += vErrorStyle ? '...' : ': ...';
			break;
		}

		seen.add(cause);
		text += vErrorStyle ? '' : `: ${cause.message || ''}`;
	}

	return text;
}

/** The stacks of an error and its causes, as pino joins them: each cause's after `caused by: `. */
function stackWithCauses(error: ErrorLike): string {
	let text = error.stack ?? '';
	const seen = new Set<ErrorLike>([error]);
	for (let cause = causeOf(error); cause !== undefined; cause = causeOf(cause)) {
		if (seen.has(cause)) {
			text += '\ncauses have become circular...';
			break;
		}

		seen.add(cause);
		text += `\ncaused by: ${cause.stack ?? ''}`;
	}

	return text;
}

/** An error as pino writes its `err` field, its causes in `message` and `stack`. */
function serializeError(value: unknown, writing = new Set<unknown>()): unknown {
	if (!isErrorLike(value)) {
		return value;
	}

	writing.add(value);
	const serialized: Record<string, unknown> = {
		type: typeof value.constructor === 'function' ? value.constructor.name : value.name,
		message: messageWithCauses(value),
		stack: stackWithCauses(value),
	};
	if (Array.isArray(value.errors)) {
		serialized['aggregateErrors'] = value.errors.map(inner => serializeError(inner, writing));
	}

	for (const key in value) {
		if (serialized[key] === undefined) {
			const inner = (value as unknown as Record<string, unknown>)[key];
			if (!isErrorLike(inner)) {
				serialized[key] = inner;
			} else if (key !== 'cause' && !writing.has(inner)) {
				serialized[key] = serializeError(inner, writing);
			}
		}
	}

	writing.delete(value);
	return serialized;
}
