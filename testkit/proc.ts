/**
 * Child processes for the tests and the benchmarks: each one in its own process
 * group (so that stopping it reaches every worker it forked), its output split
 * into timed lines, and bounded waits on those lines, on its exit, and on
 * conditions no event announces.
 *
 * Shared by test/helpers/cluster.ts, testkit/rollout.ts and bench/lib/proc.js
 * (through dist/testkit/), so it uses node built-ins and p-event only and knows
 * nothing of ava: the caller registers `stop()` in its own teardown.
 */
import {spawn, type ChildProcess, type StdioNull, type StdioPipe} from 'node:child_process';
import {EventEmitter} from 'node:events';
import {readFileSync} from 'node:fs';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import {setTimeout as sleep} from 'node:timers/promises';
import {pEvent} from 'p-event';

export interface Line {
	/** performance.now() when the chunk holding the line arrived. */
	readonly at: number;
	readonly stream: 'stdout' | 'stderr';
	readonly text: string;
}

export interface Exit {
	readonly code: number | null;
	readonly signal: NodeJS.Signals | null;
	/** performance.now() when the process exited. */
	readonly at: number;
}

export interface WaitOptions {
	/** Resolve with the `count`-th match. @default 1 */
	readonly count?: number;
	/** @default 15_000 */
	readonly timeout?: number;
	/** What is awaited, for the error message. @default 'a matching line' */
	readonly what?: string;
}

export interface SpawnOptions<T> {
	/** For error messages. @default the file's base name */
	readonly name?: string;
	readonly cwd?: string;
	/** The child's whole environment. @default process.env */
	readonly env?: NodeJS.ProcessEnv;
	/** 'pipe' splits the stream into lines here; a file descriptor or 'ignore' costs this process nothing. @default 'pipe' */
	readonly stdout?: StdioPipe | StdioNull | number;
	/** @default 'pipe' */
	readonly stderr?: StdioPipe | StdioNull | number;
	/** Turns a line into what `lines` keeps; undefined drops the line. @default every line as is */
	readonly parse?: (line: Line) => T | undefined;
	/** How much of the output `output()` keeps, in characters. @default 6000 */
	readonly outputChars?: number;
}

/**
 * A child process in its own process group. Emits 'line' (each kept record),
 * 'exit' (an `Exit`, once the process has exited and its output has been read:
 * a test that reads `lines` after it sees the last ones) and 'closed' (its
 * output streams have ended: no line comes after it).
 */

/**
 * How long 'exit' waits for the output to end after the process exited: a
 * descendant that kept the pipes open must not hold the caller forever.
 */
const OUTPUT_AFTER_EXIT_MS = 2000;

export class GroupProcess<T = Line> extends EventEmitter {
	readonly pid: number;
	/** performance.now() just before the spawn. */
	readonly spawnedAt: number;
	/** Every kept record, in order of arrival. */
	readonly lines: T[] = [];
	readonly exited: Promise<Exit>;
	exit: Exit | undefined;
	closed = false;
	/** 'exit' has been emitted. */
	private announced = false;
	private tail = '';
	private readonly pending = {stdout: '', stderr: ''};

	constructor(readonly name: string, readonly child: ChildProcess, spawnedAt: number, private readonly options: Pick<SpawnOptions<T>, 'parse' | 'outputChars'> = {}) {
		super();
		this.setMaxListeners(100);
		this.pid = child.pid!;
		this.spawnedAt = spawnedAt;
		this.exited = pEvent(this, 'exit', {rejectionEvents: []}) as Promise<Exit>;
		const announce = (): void => {
			if (!this.announced && this.exit) {
				this.announced = true;
				this.emit('exit', this.exit);
			}
		};

		child.once('exit', (code, signal) => {
			// `at` is the exit itself; the event waits for the last lines (above).
			this.exit = {code, signal, at: performance.now()};
			if (this.closed) {
				announce();
			} else {
				setTimeout(announce, OUTPUT_AFTER_EXIT_MS).unref();
			}
		});
		child.once('close', () => {
			this.closed = true;
			this.emit('closed');
			announce();
		});
		for (const stream of ['stdout', 'stderr'] as const) {
			child[stream]?.setEncoding('utf8');
			child[stream]?.on('data', (chunk: string) => {
				this.feed(stream, chunk);
			});
		}
	}

	/** Takes output that does not come through a pipe (bench: a file it polls). */
	feed(stream: Line['stream'], chunk: string, at = performance.now()): void {
		const limit = this.options.outputChars ?? 6000;
		this.tail = limit === Number.POSITIVE_INFINITY ? this.tail + chunk : (this.tail + chunk).slice(-limit);
		const parts = (this.pending[stream] + chunk).split('\n');
		this.pending[stream] = parts.pop()!;
		for (const text of parts) {
			const line: Line = {at, stream, text};
			const record = this.options.parse ? this.options.parse(line) : line as T;
			if (record !== undefined) {
				this.lines.push(record);
				this.emit('line', record);
			}
		}
	}

	/** The last `outputChars` characters written, both streams, for failure messages. */
	output(): string {
		return this.tail;
	}

	/** Resolves with the `count`-th record (present or future) that passes `test`; rejects after `timeout` or once no more output can come. */
	async waitFor(test: (record: T) => boolean, {count = 1, timeout = 15_000, what = 'a matching line'}: WaitOptions = {}): Promise<T> {
		const find = (): T | undefined => {
			let n = 0;
			return this.lines.find(record => test(record) && ++n === count);
		};

		let cause: unknown;
		let seen = this.lines.filter(record => test(record)).length;
		if (seen < count && !this.closed) {
			try {
				return await pEvent(this, 'line', {filter: (record: T) => test(record) && ++seen >= count, timeout, rejectionEvents: ['closed']});
			} catch (error) {
				cause = error;
			}
		}

		// Also after a rejection: p-event settles a match a microtask late, so
		// 'closed' emitted right behind the last line can win the race.
		const found = find();
		if (found !== undefined) {
			return found;
		}

		const why = this.closed ? `never came: the process exited (${JSON.stringify(this.exit)})` : `did not come within ${timeout} ms`;
		throw new Error(`${this.name}: ${what} (x${count}) ${why}. Output:\n${this.output().slice(-4000)}`, {cause});
	}

	/** The exit, or undefined if the process is still running after `ms` (an unref'd timer: it never holds the caller's process). */
	async exitWithin(ms: number): Promise<Exit | undefined> {
		if (this.announced) {
			return this.exit;
		}

		try {
			return await pEvent(this, 'exit', {signal: AbortSignal.timeout(ms)}) as Exit;
		} catch {
			return undefined;
		}
	}

	/** Signals this process alone (what a container runtime does to PID 1); returns performance.now(). */
	signal(signal: NodeJS.Signals): number {
		const at = performance.now();
		process.kill(this.pid, signal);
		return at;
	}

	/** Signals the whole process group (what a terminal's Ctrl-C does); returns performance.now(). */
	signalGroup(signal: NodeJS.Signals): number {
		const at = performance.now();
		process.kill(-this.pid, signal);
		return at;
	}

	/** SIGKILLs the whole group, workers that outlived the process included; never throws. */
	stop(): void {
		try {
			process.kill(-this.pid, 'SIGKILL');
		} catch {}
	}
}

/** Spawns `file args` detached (its own process group, led by the child). */
export function spawnGroup<T = Line>(file: string, args: readonly string[], options: SpawnOptions<T> = {}): GroupProcess<T> {
	const spawnedAt = performance.now();
	const child = spawn(file, args, {
		cwd: options.cwd,
		env: options.env ?? process.env,
		detached: true,
		stdio: ['ignore', options.stdout ?? 'pipe', options.stderr ?? 'pipe'],
	});
	return new GroupProcess<T>(options.name ?? path.basename(file), child, spawnedAt, options);
}

/** Parses a line as a JSON object (a log line); undefined for anything else. */
export function parseJsonLine(line: Line): Record<string, unknown> | undefined {
	try {
		const value: unknown = JSON.parse(line.text);
		return value !== null && typeof value === 'object' && !Array.isArray(value) ? value as Record<string, unknown> : undefined;
	} catch {
		return undefined;
	}
}

/** process.env without the GRACEFUL_CLUSTER_* settings a developer may have exported, plus `extra`. */
export function cleanEnv(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
	const env = Object.entries(process.env);
	// TEST_GRACEFUL_CLUSTER_<OPTION>=value runs every cluster of the suite with that option on
	// (TEST_GRACEFUL_CLUSTER_MAX_CONNECTION_AGE=400ms npm test); a test's own flags still win.
	const suiteWide = env.filter(([key]) => key.startsWith('TEST_GRACEFUL_CLUSTER_')).map(([key, value]): [string, string | undefined] => [key.slice('TEST_'.length), value]);
	const kept = env.filter(([key]) => !key.startsWith('GRACEFUL_CLUSTER_'));
	return {...Object.fromEntries(kept), ...Object.fromEntries(suiteWide), ...extra} as NodeJS.ProcessEnv;
}

/**
 * True while a process with this pid runs. A zombie (exited, not yet reaped by
 * whoever inherited it) does not count: it holds no port and runs no code.
 */
export function isAlive(pid: number): boolean {
	try {
		process.kill(pid, 0);
	} catch {
		return false;
	}

	try {
		const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
		const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
		return state !== 'Z' && state !== 'X';
	} catch {
		return false;
	}
}

export interface PollOptions {
	readonly timeout: number;
	/** @default 50 */
	readonly interval?: number;
}

/**
 * Polls `condition` until it holds, at most `timeout` ms; resolves with its last
 * value. For conditions no event announces (another process's death, a port let
 * go, a counter in a load loop); anything with an event waits on it instead.
 */
export async function eventually(condition: () => boolean | Promise<boolean>, {timeout, interval = 50}: PollOptions): Promise<boolean> {
	const deadline = performance.now() + timeout;
	while (performance.now() < deadline) {
		if (await condition()) {
			return true;
		}

		await sleep(Math.min(interval, Math.max(0, deadline - performance.now())));
	}

	return condition();
}

/** `eventually`, but rejects naming `what` when the condition does not come true in time. */
export async function waitUntil(condition: () => boolean | Promise<boolean>, options: PollOptions & {readonly what: string}): Promise<void> {
	if (!await eventually(condition, options)) {
		throw new Error(`${options.what}: not within ${options.timeout} ms`);
	}
}
