/**
 * Spawns the real CLI (or a fixture under plain node) in its own process group,
 * parses its JSON log lines as they come, and always kills the whole group in
 * teardown, so no test leaves a worker behind.
 */
import {fileURLToPath} from 'node:url';
import path from 'node:path';
import type {ChildProcess} from 'node:child_process';
import type {ExecutionContext} from 'ava';
import {cleanEnv, parseJsonLine, spawnGroup, type Exit} from '../../testkit/proc.js';

export const ROOT = path.resolve(fileURLToPath(import.meta.url), '../../../..');
export const CLI = path.join(ROOT, 'dist/bundle/cli.cjs');
export const fixture = (name: string): string => path.join(ROOT, 'test/fixtures', name);

export type LogLine = Record<string, unknown> & {msg?: string; role?: string; level?: string};

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
	/** The exit, or undefined if the process still runs after `ms`. */
	exitWithin(ms: number): Promise<Exit | undefined>;
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
	const proc = spawnGroup(options.command ?? process.execPath, argv, {
		name: options.command ?? (options.plainNode ? 'node' : 'graceful-cluster'),
		cwd: options.cwd ?? ROOT,
		env: cleanEnv(options.env),
		// Log lines are JSON on stdout; stderr only goes into text().
		parse: line => (line.stream === 'stdout' ? parseJsonLine(line) as LogLine | undefined : undefined),
		outputChars: Number.POSITIVE_INFINITY,
	});
	t.teardown(() => {
		proc.stop();
	});

	return {
		child: proc.child,
		pid: proc.pid,
		lines: proc.lines,
		text: () => proc.output(),
		async waitForLog(match, {count = 1, timeout = 15_000} = {}) {
			const test = typeof match === 'string' ? (line: LogLine) => line.msg === match : match;
			return proc.waitFor(test, {count, timeout, what: `a log line matching ${String(match)}`});
		},
		exited: proc.exited,
		exitWithin: async ms => proc.exitWithin(ms),
		kill: signal => proc.signal(signal),
		killGroup: signal => proc.signalGroup(signal),
	};
}

/** Starts the CLI on a fixture and waits until `workers` workers listen; returns the port. */
export async function startCluster(t: ExecutionContext, options: readonly string[], script: string, {workers = 2, env, appArgs = []}: {workers?: number; env?: Record<string, string>; appArgs?: string[]} = {}): Promise<Proc & {port: number}> {
	const proc = start(t, ['--workers', String(workers), ...options, script, ...appArgs], {env});
	const line = await proc.waitForLog('worker listening', {count: workers});
	const port = Number(String(line['address']).split(':').pop());
	return Object.assign(proc, {port});
}
