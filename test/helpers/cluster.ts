/**
 * Spawns the real CLI (or a fixture under plain node) in its own process group,
 * parses its JSON log lines as they come, and always kills the whole group in
 * teardown, so no test leaves a worker behind.
 */
import {spawn, type ChildProcess} from 'node:child_process';
import {EventEmitter} from 'node:events';
import {readFileSync} from 'node:fs';
import {fileURLToPath} from 'node:url';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import type {ExecutionContext} from 'ava';
import {pEvent} from 'p-event';

export const ROOT = path.resolve(fileURLToPath(import.meta.url), '../../../..');
export const CLI = path.join(ROOT, 'dist/src/cli.js');
export const fixture = (name: string): string => path.join(ROOT, 'test/fixtures', name);

export type LogLine = Record<string, unknown> & {msg?: string; role?: string; level?: string};

export interface Exit {
	readonly code: number | null;
	readonly signal: NodeJS.Signals | null;
	/** performance.now() when the process exited. */
	readonly at: number;
}

export interface Proc {
	readonly child: ChildProcess;
	readonly pid: number;
	/** Every JSON line from stdout, in order. */
	readonly lines: LogLine[];
	/** Everything written, both streams, for failure messages. */
	text(): string;
	/** Resolves with the first line (present or future) that matches. */
	waitForLog(match: string | ((line: LogLine) => boolean), options?: {count?: number; timeout?: number}): Promise<LogLine>;
	readonly exited: Promise<Exit>;
	/** Signals the primary alone, as the kubelet does. */
	kill(signal: NodeJS.Signals): number;
	/** Signals the whole process group, as a terminal's Ctrl-C does. */
	killGroup(signal: NodeJS.Signals): number;
}

export interface StartOptions {
	readonly env?: Record<string, string>;
	/** Run `node <args>` instead of the CLI. */
	readonly plainNode?: boolean;
	/** Run this command with `args` instead (e.g. `unshare`). */
	readonly command?: string;
	/** Working directory; the repository by default. */
	readonly cwd?: string;
}

export function start(t: ExecutionContext, args: readonly string[], options: StartOptions = {}): Proc {
	const argv = options.plainNode || options.command ? [...args] : [CLI, ...args];
	const child = spawn(options.command ?? process.execPath, argv, {
		cwd: options.cwd ?? ROOT,
		detached: true,
		stdio: ['ignore', 'pipe', 'pipe'],
		env: {...cleanEnv(), ...options.env},
	});
	const pid = child.pid!;
	t.teardown(() => {
		try {
			process.kill(-pid, 'SIGKILL');
		} catch {}
	});

	const lines: LogLine[] = [];
	const events = new EventEmitter();
	events.setMaxListeners(100);
	let text = '';
	let pending = '';
	child.stdout!.setEncoding('utf8');
	child.stdout!.on('data', (chunk: string) => {
		text += chunk;
		pending += chunk;
		let index: number;
		while ((index = pending.indexOf('\n')) !== -1) {
			const raw = pending.slice(0, index);
			pending = pending.slice(index + 1);
			let line: LogLine | undefined;
			try {
				line = JSON.parse(raw) as LogLine;
			} catch {}

			if (line && typeof line === 'object') {
				lines.push(line);
				events.emit('line', line);
			}
		}
	});
	child.stderr!.setEncoding('utf8');
	child.stderr!.on('data', (chunk: string) => {
		text += chunk;
	});
	const exited = new Promise<Exit>(resolve => {
		child.once('exit', (code, signal) => {
			resolve({code, signal, at: performance.now()});
		});
	});

	const matcher = (match: string | ((line: LogLine) => boolean)) => typeof match === 'string' ? (line: LogLine) => line.msg === match : match;
	return {
		child,
		pid,
		lines,
		text: () => text,
		async waitForLog(match, {count = 1, timeout = 15_000} = {}) {
			const test = matcher(match);
			const seen = () => lines.filter(line => test(line));
			if (seen().length >= count) {
				return seen()[count - 1]!;
			}

			try {
				await pEvent(events, 'line', {filter: () => seen().length >= count, timeout});
			} catch (error) {
				throw new Error(`no log line matching ${String(match)} (x${count}) within ${timeout} ms. Output so far:\n${text.slice(-4000)}`, {cause: error});
			}

			return seen()[count - 1]!;
		},
		exited,
		kill: signal => {
			process.kill(pid, signal);
			return performance.now();
		},
		killGroup: signal => {
			process.kill(-pid, signal);
			return performance.now();
		},
	};
}

/** Our env without any GRACEFUL_CLUSTER_* the developer may have set. */
function cleanEnv(): NodeJS.ProcessEnv {
	return Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('GRACEFUL_CLUSTER_')));
}

/** Starts the CLI on a fixture and waits until `workers` workers listen; returns the port. */
export async function startCluster(t: ExecutionContext, options: readonly string[], script: string, {workers = 2, env, appArgs = []}: {workers?: number; env?: Record<string, string>; appArgs?: string[]} = {}): Promise<Proc & {port: number}> {
	const proc = start(t, ['--workers', String(workers), ...options, script, ...appArgs], {env});
	const line = await proc.waitForLog('worker listening', {count: workers});
	const port = Number(String(line['address']).split(':').pop());
	return Object.assign(proc, {port});
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
