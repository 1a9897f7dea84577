// Start time of the command (issue 21, item 1), in one run, every case in turn
// in each round (the order rotates from round to round) so that a drift of the
// machine's speed moves them all alike:
//
//   start:  `graceful-cluster -w 2 app` until both workers listen (the primary's
//           'worker listening' lines), vs a hand-written node:cluster primary
//           running the same app (servers/cluster.mjs) until both listen, vs
//           plain `node app` until it listens; the app is servers/hello.mjs,
//           without attach() unless said
//   flags:  `graceful-cluster --version` and `--help` until exit, vs `node -e 0`
//
//   node bench/startup.js [--rounds 15] [--warmup 2] [--dist [label=]dir ...] [--only start|flags]
//
// --dist names the build to run (a dist/ dir: its bundle/cli.js, or src/cli.js in a
// build from before the bundle; ../dist by default).
// Given more than once, every build's cases join the same rounds, so that two
// builds (before and after a change) are compared under the same conditions.
//
// Each figure is from just before the spawn to the line (or the exit), read
// here through a pipe; each server is then killed with its process group and
// reaped before the next one starts. Medians (min-max); a ratio is taken round
// by round, then its median. Run after `npm run build`. Nothing else should run
// on the machine meanwhile: on 2 cores another process's CPU is in the figures.
import {spawn} from 'node:child_process';
import {existsSync} from 'node:fs';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import {setTimeout as sleep} from 'node:timers/promises';
import {parseArgs} from 'node:util';
import {fmt, summary} from './lib/stats.js';

const {values: flags} = parseArgs({options: {
	rounds: {type: 'string', default: '15'},
	warmup: {type: 'string', default: '2'},
	dist: {type: 'string', multiple: true, default: [new URL('../dist', import.meta.url).pathname]},
	only: {type: 'string'},
	help: {type: 'boolean', short: 'h'},
}});
if (flags.help) {
	process.stdout.write('node bench/startup.js [--rounds 15] [--warmup 2] [--dist [label=]dir ...] [--only start|flags]\n');
	process.exit(0);
}

/** Each build under test: its label (none for a single build) and its CLI. */
const BUILDS = flags.dist.map(spec => {
	const [label, dir] = spec.includes('=') ? spec.split(/=(.*)/s) : [flags.dist.length > 1 ? path.basename(path.resolve(spec)) : '', spec];
	const dist = path.resolve(dir);
	// What the package runs (package.json's bin and exports), or a build from before the bundle: the compiled tree.
	const shipped = ['bundle/cli.js', 'bundle/worker/index.js'].map(file => path.join(dist, file));
	const [cli, worker] = existsSync(shipped[0]) ? shipped : ['src/cli.js', 'src/worker/index.js'].map(file => path.join(dist, file));
	if (!existsSync(cli)) {
		throw new Error(`${cli} is missing: run \`npm run build\` first (or give --dist).`);
	}

	return {label, dist, cli, worker};
});
const HELLO = new URL('servers/hello.mjs', import.meta.url).pathname;
const CLUSTER = new URL('servers/cluster.mjs', import.meta.url).pathname;
const ROUNDS = Number(flags.rounds);
const WARMUP = Number(flags.warmup);
const TIMEOUT_MS = 15_000;

// The app listens on a port of its own choosing: no port to find first, none to collide.
const APP_ENV = {PORT: '0'};

/** One case per build: `name [label]`. */
const perBuild = make => Object.fromEntries(BUILDS.flatMap(build => Object.entries(make(build)).map(([name, spec]) => [build.label ? `${name} [${build.label}]` : name, spec])));

/** The cases; `until` is the number of matching lines to wait for, or 'exit'. */
const START_CASES = {
	...perBuild(({cli, worker}) => ({
		'graceful-cluster -w 2 app': {args: [cli, '-w', '2', HELLO], env: {BENCH_WRAP: 'none'}, msg: 'worker listening', until: 2},
		'graceful-cluster -w 2 app (attach)': {args: [cli, '-w', '2', HELLO], env: {BENCH_WRAP: 'attach', BENCH_WORKER: worker}, msg: 'worker listening', until: 2},
	})),
	'node:cluster primary, 2 workers': {args: [CLUSTER], env: {BENCH_WRAP: 'none', WORKERS: '2'}, msg: 'worker listening', until: 2},
	'node app': {args: [HELLO], env: {BENCH_WRAP: 'none'}, msg: 'listening', until: 1},
};
const FLAG_CASES = {
	...perBuild(({cli}) => ({
		'graceful-cluster --version': {args: [cli, '--version'], until: 'exit'},
		'graceful-cluster --help': {args: [cli, '--help'], until: 'exit'},
	})),
	'node -e 0': {args: ['-e', '0'], until: 'exit'},
};

/** One timed run: ms from just before the spawn to the `until`-th matching line, or to the exit. */
async function once({args, env = {}, msg, until}) {
	const startedAt = performance.now();
	const child = spawn(process.execPath, args, {
		env: {...process.env, ...APP_ENV, ...env},
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

/** Runs every case once per round, rotating the order; returns the samples per case and per round. */
async function measure(cases) {
	const names = Object.keys(cases);
	const samples = Object.fromEntries(names.map(name => [name, []]));
	for (let round = -WARMUP; round < ROUNDS; round++) {
		const shift = ((round % names.length) + names.length) % names.length;
		const order = [...names.slice(shift), ...names.slice(0, shift)];
		for (const name of order) {
			// One after the other by design: two at once would share the 2 cores.
			// eslint-disable-next-line no-await-in-loop
			const ms = await once(cases[name]);
			if (round >= 0) {
				samples[name].push(ms);
			}

			// Let the killed group's exit settle before the next spawn.
			// eslint-disable-next-line no-await-in-loop
			await sleep(30);
		}
	}

	return samples;
}

const ms = s => fmt(s, {decimals: 0, unit: ' ms'});
const ratio = (a, b) => fmt(summary(a.map((value, i) => value / b[i])), {unit: 'x'});

function table(samples, baselines) {
	const lines = [`| case | median (min-max) | ${baselines.map(b => `vs ${b}`).join(' | ')} |`, `| --- | --- |${baselines.map(() => ' --- |').join('')}`];
	for (const [name, values] of Object.entries(samples)) {
		lines.push(`| ${name} | ${ms(summary(values))} | ${baselines.map(b => b === name ? '' : ratio(values, samples[b])).join(' | ')} |`);
	}

	return lines.join('\n');
}

process.stdout.write(`node ${process.version}, ${ROUNDS} rounds (+${WARMUP} warm-up); ${BUILDS.map(({label, cli}) => (label ? `${label}: ${cli}` : cli)).join(', ')}${process.env.NODE_EXTRA_CA_CERTS ? '; NODE_EXTRA_CA_CERTS is set (every node process reads it at start)' : ''}\n\n`);
if (flags.only !== 'flags') {
	process.stdout.write(`start: spawn -> all workers listening\n${table(await measure(START_CASES), ['node:cluster primary, 2 workers', 'node app'])}\n\n`);
}

if (flags.only !== 'start') {
	process.stdout.write(`flags: spawn -> exit\n${table(await measure(FLAG_CASES), ['node -e 0'])}\n`);
}
