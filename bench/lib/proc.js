// Child processes for the benchmark: every server runs in its own process group
// (detached) so that a cleanup can kill it with everything it forked. Every
// spawned group is remembered and killed in `killAll()`, which perf.js runs in a
// finally block and on SIGINT/SIGTERM.
import {execFileSync, spawn} from 'node:child_process';
import {closeSync, cpSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import readline from 'node:readline';

const groups = new Set();

export const ROOT = new URL('../../', import.meta.url).pathname;

/**
 * The build under test. Other people rebuild dist/ (`rm -rf dist && tsc`) while
 * they work, which would pull it from under a running benchmark, so the run takes
 * a copy first. The copy sits under the root's node_modules/.cache so that it
 * still resolves pino, yargs and p-event from the root's node_modules.
 * BENCH_DIST=<dir> benchmarks another build (a dir holding src/cli.js).
 */
export function snapshotDist(name = 'current') {
	if (process.env.BENCH_DIST) {
		return path.resolve(process.env.BENCH_DIST);
	}

	const source = path.join(ROOT, 'dist');
	const target = path.join(ROOT, 'node_modules/.cache/graceful-cluster-bench', name);
	if (!existsSync(path.join(source, 'src/cli.js'))) {
		throw new Error(`${source}/src/cli.js is missing: run \`npm run build\` at the repo root first.`);
	}

	rmSync(target, {recursive: true, force: true});
	cpSync(source, target, {recursive: true});
	return target;
}

export const paths = {dist: '', cli: ''};
export function useDist(dir) {
	paths.dist = dir;
	paths.cli = path.join(dir, 'src/cli.js');
}
export const HELLO = new URL('../servers/hello.mjs', import.meta.url).pathname;
export const CLUSTER = new URL('../servers/cluster.mjs', import.meta.url).pathname;

/** A free TCP port on 127.0.0.1 (asked of the kernel, then released). */
export async function freePort() {
	const server = net.createServer();
	await new Promise(resolve => server.listen(0, '127.0.0.1', resolve));
	const {port} = server.address();
	await new Promise(resolve => server.close(resolve));
	return port;
}

/**
 * Spawns `node ...args` with stdout parsed as JSON lines. `lines` holds each
 * parsed line with `at`, the performance.now() of its arrival here.
 * With `stdout: 'ignore'`, output goes nowhere (no parsing cost during loads).
 */
export function start(args, {env = {}, stdout = 'pipe', nodeArgs = []} = {}) {
	// 'file': the output goes to a file that is polled only while someone waits
	// for a line, so that a flood of debug lines costs this process nothing.
	let file;
	let stdio = stdout;
	if (stdout === 'file') {
		const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-bench-'));
		file = {dir, path: path.join(dir, 'out.ndjson'), offset: 0, pending: ''};
		stdio = openSync(file.path, 'w');
	}

	const spawnedAt = performance.now();
	const child = spawn(process.execPath, [...nodeArgs, ...args], {
		cwd: ROOT,
		env: {...process.env, BENCH_DIST: paths.dist, ...env},
		stdio: ['ignore', stdio, 'inherit'],
		detached: true,
	});
	if (file) {
		closeSync(stdio);
	}

	groups.add(child.pid);
	const proc = {
		child,
		pid: child.pid,
		spawnedAt,
		lines: [],
		waiters: new Set(),
		exitedAt: undefined,
		exit: undefined,
	};
	proc.exited = new Promise(resolve => {
		child.once('exit', (code, signal) => {
			proc.exitedAt = performance.now();
			proc.exit = {code, signal};
			resolve(proc.exit);
		});
	});
	const onLine = text => {
		const at = performance.now();
		let line;
		try {
			line = JSON.parse(text);
		} catch {
			return;
		}

		line.at = at;
		proc.lines.push(line);
		for (const waiter of proc.waiters) {
			waiter();
		}
	};

	if (child.stdout) {
		readline.createInterface({input: child.stdout}).on('line', onLine);
	}

	let poller;
	const buffer = Buffer.alloc(1 << 20);
	const poll = () => {
		const fd = openSync(file.path, 'r');
		try {
			for (let n; (n = readSync(fd, buffer, 0, buffer.length, file.offset)) > 0;) {
				file.offset += n;
				const text = file.pending + buffer.toString('utf8', 0, n);
				const parts = text.split('\n');
				file.pending = parts.pop();
				for (const part of parts) {
					onLine(part);
				}
			}
		} finally {
			closeSync(fd);
		}
	};

	const watch = on => {
		if (!file) {
			return;
		}

		if (on && !poller) {
			poll();
			poller = setInterval(poll, 5);
		} else if (!on && poller && proc.waiters.size === 0) {
			clearInterval(poller);
			poller = undefined;
		}
	};

	child.once('exit', () => {
		if (file) {
			try {
				poll();
			} catch {}

			for (const waiter of proc.waiters) {
				waiter();
			}
		}
	});
	proc.removeFile = () => {
		if (file) {
			rmSync(file.dir, {recursive: true, force: true});
		}
	};

	/** Resolves with the `count`-th line matching `predicate` (bounded by `timeoutMs`). */
	proc.waitFor = (predicate, {count = 1, timeoutMs = 15_000} = {}) => new Promise((resolve, reject) => {
		const check = () => {
			const matches = proc.lines.filter(predicate);
			if (matches.length >= count) {
				cleanup();
				resolve(matches[count - 1]);
				return true;
			}

			return false;
		};

		const onExit = () => {
			if (!check()) {
				cleanup();
				reject(new Error(`process ${child.pid} (${args.join(' ')}) exited before the expected log line`));
			}
		};

		const timer = setTimeout(() => {
			cleanup();
			reject(new Error(`timed out after ${timeoutMs} ms waiting for a log line of ${args.join(' ')}`));
		}, timeoutMs);
		const cleanup = () => {
			clearTimeout(timer);
			proc.waiters.delete(check);
			child.off('exit', onExit);
			watch(false);
		};

		if (!check()) {
			proc.waiters.add(check);
			watch(true);
			child.once('exit', onExit);
		}
	});
	proc.msg = (msg, options) => proc.waitFor(line => line.msg === msg, options);
	/** Signals the process itself (not its group): what a container runtime does to PID 1. */
	proc.signal = signal => {
		const at = performance.now();
		child.kill(signal);
		return at;
	};
	proc.stop = () => {
		stopGroup(child.pid);
		if (poller) {
			clearInterval(poller);
		}

		proc.removeFile();
	};
	return proc;
}

function stopGroup(pid) {
	try {
		process.kill(-pid, 'SIGKILL');
	} catch {}

	groups.delete(pid);
}

/** Stops every process group this run started. */
export function killAll() {
	for (const pid of [...groups]) {
		stopGroup(pid);
	}
}

export const sleep = ms => new Promise(resolve => {
	setTimeout(resolve, ms);
});

/** Bounded wait for a child's exit; SIGKILLs its group on timeout. */
export async function waitExit(proc, timeoutMs = 15_000) {
	let timer;
	const result = await Promise.race([
		proc.exited,
		new Promise(resolve => {
			timer = setTimeout(() => resolve(undefined), timeoutMs);
		}),
	]);
	clearTimeout(timer);
	if (result === undefined) {
		proc.stop();
		throw new Error(`process ${proc.pid} did not exit within ${timeoutMs} ms`);
	}

	// The primary is gone; anything left in its group (an orphaned worker) goes too.
	proc.stop();
	return result;
}

/** Every process in `proc`'s group (the primary and its workers). */
export function groupPids(proc) {
	try {
		return execFileSync('pgrep', ['-g', String(proc.pid)], {encoding: 'utf8'}).trim().split('\n').map(Number).filter(Boolean);
	} catch {
		return [proc.pid];
	}
}

/** User + system CPU time of `pids`, in ms (from /proc/<pid>/stat, 100 ticks a second). */
export function cpuMs(pids) {
	let ticks = 0;
	for (const pid of pids) {
		try {
			const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
			const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
			ticks += Number(fields[11]) + Number(fields[12]);
		} catch {}
	}

	return ticks * 10;
}

/** Busy CPU time of the whole machine, all cores, in ms (from /proc/stat). */
export function machineBusyMs() {
	const [cpu] = readFileSync('/proc/stat', 'utf8').split('\n');
	const [user, nice, system, , , irq, softirq, steal] = cpu.split(/\s+/).slice(1).map(Number);
	return (user + nice + system + irq + softirq + steal) * 10;
}
