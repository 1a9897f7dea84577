// Child processes for the benchmark: every server runs in its own process group
// (detached) so that a cleanup can kill it with everything it forked. Every
// spawned group is remembered and killed in `killAll()`, which perf.js runs in a
// finally block and on SIGINT/SIGTERM.
import {execFileSync} from 'node:child_process';
import {closeSync, cpSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';
// The process, port and polling helpers the tests use too, compiled by the root's
// `npm run build` (which `npm run bench` runs first).
import {parseJsonLine, spawnGroup} from '../../dist/testkit/proc.js';

export {freePort} from '../../dist/testkit/net.js';
export {setTimeout as sleep} from 'node:timers/promises';

const groups = new Set();

export const ROOT = new URL('../../', import.meta.url).pathname;

/** A JSON log line with the time it was read (`at`), as the benches wait on them; undefined for any other line. */
export function parseTimedLine(line) {
	const record = parseJsonLine(line);
	if (record) {
		record.at = line.at;
	}

	return record;
}

/**
 * The build under test. Other people rebuild dist/ (`rm -rf dist && tsc`) while
 * they work, which would pull it from under a running benchmark, so the run takes
 * a copy first. The copy sits under the root's node_modules/.cache so that it
 * still resolves yargs and p-event from the root's node_modules.
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

export const paths = {dist: '', cli: '', worker: ''};
export function useDist(dir) {
	paths.dist = dir;
	// The bundle the package runs (package.json's bin and exports); a build from before it has the compiled tree only.
	// bundle/cli.cjs since the CLI became CommonJS, bundle/cli.js before.
	const bundleCli = ['bundle/cli.cjs', 'bundle/cli.js'].find(file => existsSync(path.join(dir, file)));
	const bundled = bundleCli !== undefined;
	paths.cli = path.join(dir, bundleCli ?? 'src/cli.js');
	paths.worker = path.join(dir, bundled ? 'bundle/worker/index.js' : 'src/worker/index.js');
}
export const HELLO = new URL('../servers/hello.mjs', import.meta.url).pathname;
export const CLUSTER = new URL('../servers/cluster.mjs', import.meta.url).pathname;

/**
 * Spawns `node ...args` in its own process group, with stdout parsed as JSON
 * lines. `lines` holds each parsed line with `at`, the performance.now() of its
 * arrival here. With `stdout: 'ignore'`, output goes nowhere (no parsing cost
 * during loads). `command`: another program that runs node itself (valgrind),
 * given `args` whole (HAProxy: `parse` keeps its lines as they are, `stderr: 'pipe'`
 * takes its warnings into `lines` instead of the terminal).
 */
export function start(args, {env = {}, stdout = 'pipe', stderr = 'inherit', nodeArgs = [], command, parse = parseTimedLine} = {}) {
	// 'file': the output goes to a file that is polled only while someone waits
	// for a line, so that a flood of debug lines costs this process nothing.
	let file;
	let stdio = stdout;
	if (stdout === 'file') {
		const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-bench-'));
		file = {dir, path: path.join(dir, 'out.ndjson'), offset: 0};
		stdio = openSync(file.path, 'w');
	}

	const group = spawnGroup(command ?? process.execPath, command ? args : [...nodeArgs, ...args], {
		name: args.join(' '),
		cwd: ROOT,
		env: {...process.env, BENCH_DIST: paths.dist, BENCH_WORKER: paths.worker, ...env},
		stdout: stdio,
		stderr,
		parse,
	});
	if (file) {
		closeSync(stdio);
	}

	groups.add(group.pid);

	let poller;
	let waiting = 0;
	const buffer = Buffer.alloc(1 << 20);
	const poll = () => {
		const fd = openSync(file.path, 'r');
		try {
			for (let n; (n = readSync(fd, buffer, 0, buffer.length, file.offset)) > 0;) {
				file.offset += n;
				group.feed('stdout', buffer.toString('utf8', 0, n));
			}
		} finally {
			closeSync(fd);
		}
	};

	if (file) {
		// The last lines, before a wait can give up on the exit.
		group.once('exit', () => {
			try {
				poll();
			} catch {}
		});
	}

	const proc = {
		group,
		child: group.child,
		pid: group.pid,
		/** performance.now() just before the spawn. */
		spawnedAt: group.spawnedAt,
		lines: group.lines,
		exited: group.exited,
		/** {code, signal, at} once exited. */
		get exit() {
			return group.exit;
		},
		/** Resolves with the `count`-th line matching `predicate` (bounded by `timeoutMs`; rejects if the process exits first). */
		async waitFor(predicate, {count = 1, timeoutMs = 15_000} = {}) {
			if (file && waiting++ === 0) {
				poll();
				poller = setInterval(poll, 5);
			}

			try {
				return await group.waitFor(predicate, {count, timeout: timeoutMs, what: 'the expected log line'});
			} finally {
				if (file && --waiting === 0) {
					clearInterval(poller);
				}
			}
		},
		msg: (msg, options) => proc.waitFor(line => line.msg === msg, options),
		/** Signals the process itself (not its group): what a container runtime does to PID 1. */
		signal: signal => group.signal(signal),
		stop() {
			group.stop();
			groups.delete(group.pid);
			clearInterval(poller);
			if (file) {
				rmSync(file.dir, {recursive: true, force: true});
			}
		},
	};
	return proc;
}

/** Stops every process group this run started. */
export function killAll() {
	for (const pid of [...groups]) {
		try {
			process.kill(-pid, 'SIGKILL');
		} catch {}

		groups.delete(pid);
	}
}

/** On SIGINT or SIGTERM: `killAll()`, then exit 130, so that an interrupted run leaves no server behind (they are not in the terminal's process group). */
export function killAllOnSignal() {
	const onSignal = signal => {
		killAll();
		process.stderr.write(`bench: ${signal}, servers stopped\n`);
		process.exit(130);
	};

	process.on('SIGINT', onSignal);
	process.on('SIGTERM', onSignal);
}

/** Bounded wait for a child's exit; SIGKILLs its group on timeout. */
export async function waitExit(proc, timeoutMs = 15_000) {
	const result = await proc.group.exitWithin(timeoutMs);
	// The primary is gone (or is killed now); anything left in its group (an orphaned worker) goes too.
	proc.stop();
	if (result === undefined) {
		throw new Error(`process ${proc.pid} did not exit within ${timeoutMs} ms`);
	}

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

/**
 * CPU time (user + system) of `pids` and all their threads, in ns, from
 * /proc/<pid>/task/<tid>/schedstat: nanoseconds where /proc/<pid>/stat counts
 * 10 ms ticks. A thread that ended between two readings takes its time with it;
 * Node's threads (V8's platform workers, libuv's pool) live as long as the process.
 */
export function cpuNs(pids) {
	let ns = 0;
	for (const pid of pids) {
		let tids = [];
		try {
			tids = readdirSync(`/proc/${pid}/task`);
		} catch {}

		for (const tid of tids) {
			try {
				ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
			} catch {}
		}
	}

	return ns;
}

/** Busy CPU time of the whole machine, all cores, in ms (from /proc/stat). */
export function machineBusyMs() {
	const [cpu] = readFileSync('/proc/stat', 'utf8').split('\n');
	const [user, nice, system, , , irq, softirq, steal] = cpu.split(/\s+/).slice(1).map(Number);
	return (user + nice + system + irq + softirq + steal) * 10;
}
