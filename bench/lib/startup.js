// Start-time measurement (bench/startup.js, and perf.js's start figure): the time
// from just before a spawn to a JSON log line (or to the exit), read here through
// a pipe; each server is then killed with its process group and reaped before
// the next one starts, one after the other, as two at once would share the cores.
import {spawn} from 'node:child_process';
import {existsSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import {setTimeout as sleep} from 'node:timers/promises';
import {cpuNs, groupPids} from './proc.js';
import {fmt, summary} from './stats.js';

const HELLO = new URL('../servers/hello.mjs', import.meta.url).pathname;
const CLUSTER = new URL('../servers/cluster.mjs', import.meta.url).pathname;
const TIMEOUT_MS = 15_000;
// pm2 is bench/'s own dependency (`npm --prefix bench install`); the case is left out without it.
const PM2_RUNTIME = new URL('../node_modules/pm2/bin/pm2-runtime', import.meta.url).pathname;

// The app listens on a port of its own choosing: no port to find first, none to collide.
const APP_ENV = {PORT: '0'};

/** One case per build (`{label, cli, worker}`): `name [label]`. */
const perBuild = (builds, make) => Object.fromEntries(builds.flatMap(build => Object.entries(make(build)).map(([name, spec]) => [build.label ? `${name} [${build.label}]` : name, spec])));

/** The cases; `until` is the number of matching lines to wait for, or 'exit'. */
export const startCases = builds => ({
	...perBuild(builds, ({cli, worker}) => ({
		'graceful-cluster -w 2 app': {args: [cli, '-w', '2', HELLO], env: {BENCH_WRAP: 'none'}, msg: 'worker listening', until: 2},
		'graceful-cluster -w 2 app (attach)': {args: [cli, '-w', '2', HELLO], env: {BENCH_WRAP: 'attach', BENCH_WORKER: worker}, msg: 'worker listening', until: 2},
	})),
	'node:cluster primary, 2 workers': {args: [CLUSTER], env: {BENCH_WRAP: 'none', WORKERS: '2'}, msg: 'worker listening', until: 2},
	// The same app as the (attach) case, attach() and all (the helper then runs as
	// under plain node), with the last build's helper: what the helper's own import
	// costs each worker is in both, and the ratio is the CLI's.
	'node:cluster primary, 2 workers (attach)': {args: [CLUSTER], env: {BENCH_WRAP: 'attach', BENCH_WORKER: builds.at(-1).worker, WORKERS: '2'}, msg: 'worker listening', until: 2},
	// What people compare with first: pm2's container entrypoint, cluster mode, its
	// state under a home of its own; the app's own 'listening' lines, which it passes on.
	...(existsSync(PM2_RUNTIME) ? {'pm2-runtime -i 2 app': {args: [PM2_RUNTIME, 'start', HELLO, '-i', '2'], env: {BENCH_WRAP: 'none', PM2_HOME: path.join(os.tmpdir(), 'graceful-cluster-bench-pm2')}, msg: 'listening', until: 2}} : {}),
	'node app': {args: [HELLO], env: {BENCH_WRAP: 'none'}, msg: 'listening', until: 1},
});
export const flagCases = builds => ({
	...perBuild(builds, ({cli}) => ({
		'graceful-cluster --version': {args: [cli, '--version'], until: 'exit'},
		'graceful-cluster --help': {args: [cli, '--help'], until: 'exit'},
	})),
	'node -e 0': {args: ['-e', '0'], until: 'exit'},
});

/**
 * One timed run: ms from just before the spawn to the `until`-th matching line,
 * or to the exit; with `onCpu`, for a line, the CPU time its process group had
 * used by then (every process and thread, ms): a start on 2 cores is bound by
 * the sum of what its processes run, more than by any one of them.
 */
async function once({args, env = {}, msg, until}, baseEnv, onCpu) {
	const startedAt = performance.now();
	const child = spawn(process.execPath, args, {
		env: {...baseEnv, ...APP_ENV, ...env},
		stdio: ['ignore', 'pipe', 'pipe'],
		// Its own process group: the kill below reaches the workers too.
		detached: true,
	});
	const closed = new Promise(resolve => {
		child.once('close', (code, signal) => resolve({code, signal, at: performance.now()}));
	});
	let stderr = '';
	child.stderr.setEncoding('utf8').on('data', chunk => {
		stderr += chunk;
	});

	const killGroup = () => {
		try {
			process.kill(-child.pid, 'SIGKILL');
		} catch {}
	};

	const timer = setTimeout(killGroup, TIMEOUT_MS);
	try {
		if (until === 'exit') {
			child.stdout.resume();
			const exit = await closed;
			if (exit.code !== 0) {
				throw new Error(`${args.join(' ')} exited ${exit.code ?? exit.signal}: ${stderr}`);
			}

			return exit.at - startedAt;
		}

		const at = await new Promise((resolve, reject) => {
			let seen = 0;
			let rest = '';
			child.stdout.setEncoding('utf8').on('data', chunk => {
				const now = performance.now();
				const lines = (rest + chunk).split('\n');
				rest = lines.pop();
				for (const line of lines) {
					let record;
					try {
						record = JSON.parse(line);
					} catch {
						continue;
					}

					if (record?.msg === msg && ++seen === until) {
						onCpu?.(cpuNs(groupPids(child)) / 1e6);
						resolve(now);
					}
				}
			});
			void closed.then(exit => reject(new Error(`${args.join(' ')} ended (${exit.code ?? exit.signal}) before ${until} '${msg}' lines: ${stderr}`)));
		});
		return at - startedAt;
	} finally {
		clearTimeout(timer);
		killGroup();
		await closed;
	}
}

/**
 * Runs every case once per round, rotating the order so that a drift of the
 * machine's speed moves them all alike; returns the samples per case, one per
 * round (a ratio is taken round by round). `env`: the children's environment.
 * `cpu`, if given, gets each case's CPU samples (ms; cases that wait for a line).
 */
export async function measure(cases, {rounds = 15, warmup = 2, env = process.env, cpu} = {}) {
	const names = Object.keys(cases);
	const samples = Object.fromEntries(names.map(name => [name, []]));
	for (let round = -warmup; round < rounds; round++) {
		const shift = ((round % names.length) + names.length) % names.length;
		const order = [...names.slice(shift), ...names.slice(0, shift)];
		for (const name of order) {
			// One after the other by design: two at once would share the 2 cores.
			const ms = await once(cases[name], env, cpu && round >= 0 ? value => (cpu[name] ??= []).push(value) : undefined);
			if (round >= 0) {
				samples[name].push(ms);
			}

			// Let the killed group's exit settle before the next spawn.
			await sleep(30);
		}
	}

	return samples;
}

const ms = s => fmt(s, {decimals: 0, unit: ' ms'});
const ratio = (a, b) => fmt(summary(a.map((value, i) => value / b[i])), {unit: 'x'});

export function table(samples, baselines) {
	const lines = [`| case | median (min-max) | ${baselines.map(b => `vs ${b}`).join(' | ')} |`, `| --- | --- |${baselines.map(() => ' --- |').join('')}`];
	for (const [name, values] of Object.entries(samples)) {
		lines.push(`| ${name} | ${ms(summary(values))} | ${baselines.map(b => b === name ? '' : ratio(values, samples[b])).join(' | ')} |`);
	}

	return lines.join('\n');
}

