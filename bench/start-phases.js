// Where a start's time goes, phase by phase, for one build or several side by
// side (bench/startup.js gives the whole figure; this one says which part moved):
//
//   primary: from its own first line of code (after Node's bootstrap) to its
//            first and second cluster.fork(): graceful-cluster -w 2 against a
//            hand-written node:cluster primary running the same app
//   worker:  a real cluster worker's way to its app's first line, with no
//            preload and with each build's bootstrap preloaded as that build's
//            primary does it (`--require` for bootstrap.cjs, `--import` for an
//            older build's bootstrap.js); then the app's import of the attach()
//            helper. One worker at a time, so that nothing else competes for
//            the cores.
//
//   node bench/start-phases.js [--rounds 15] [--dist [label=]dir ...]
//
// Medians (min-max) over the rounds; each round runs every build in turn. The
// primary's times are read by a preload (lib/phase-trace.mjs) that the workers
// do not inherit.
import {spawn} from 'node:child_process';
import {existsSync, mkdtempSync, readFileSync, rmSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import process from 'node:process';
import {pathToFileURL} from 'node:url';
import {parseArgs} from 'node:util';
import {fmt, summary} from './lib/stats.js';

const {values: flags} = parseArgs({options: {
	rounds: {type: 'string', default: '15'},
	dist: {type: 'string', multiple: true, default: [new URL('../dist', import.meta.url).pathname]},
}});
const ROUNDS = Number(flags.rounds);
const MS = {decimals: 1, unit: ' ms'};
const HELLO = new URL('servers/hello.mjs', import.meta.url).pathname;
const CLUSTER = new URL('servers/cluster.mjs', import.meta.url).pathname;
const TRACE = new URL('lib/phase-trace.mjs', import.meta.url).href;
const PHASE_APP = new URL('servers/phase-app.mjs', import.meta.url).pathname;

const builds = flags.dist.map(spec => {
	const [label, dir] = spec.includes('=') ? spec.split(/=(.*)/s) : [path.basename(path.resolve(spec, '..')), spec];
	const bundle = path.join(path.resolve(dir), 'bundle');
	// cli.cjs since the CLI became CommonJS, cli.js before.
	const cli = ['cli.cjs', 'cli.js'].map(file => path.join(bundle, file)).find(file => existsSync(file));
	if (cli === undefined) {
		throw new Error(`${bundle}/cli.cjs is missing: run \`npm run build\` first (or give --dist).`);
	}

	// Since the bootstrap became one CommonJS file (--require); before, ES modules (--import).
	const cjs = path.join(bundle, 'worker/bootstrap.cjs');
	const preload = existsSync(cjs) ? ['--require', cjs] : ['--import', pathToFileURL(path.join(bundle, 'worker/bootstrap.js')).href];
	return {label, cli, preload, helper: path.join(bundle, 'worker/index.js')};
});

const scratch = mkdtempSync(path.join(os.tmpdir(), 'start-phases-'));
const env = {...process.env, PORT: '0', BENCH_WRAP: 'none', WORKERS: '2'};
// Every node process reads it at start, the same for all: left out, as startup.js does by default.
delete env.NODE_EXTRA_CA_CERTS;

/** One start: when its primary forked, ms from its first line of code. */
async function primaryRun(args) {
	const log = path.join(scratch, 'primary.log');
	rmSync(log, {force: true});
	const child = spawn(process.execPath, ['--import', TRACE, ...args], {env: {...env, PHASE_LOG: log}, stdio: ['ignore', 'pipe', 'ignore'], detached: true});
	// Both workers listening: the start is over, as startup.js counts it.
	let seen = 0;
	await new Promise((resolve, reject) => {
		const timer = setTimeout(() => reject(new Error(`${args.join(' ')}: no two workers listening in 15 s`)), 15_000);
		child.stdout.setEncoding('utf8').on('data', chunk => {
			seen += chunk.split('\n').filter(line => line.includes('worker listening')).length;
			if (seen >= 2) {
				clearTimeout(timer);
				resolve();
			}
		});
	});
	process.kill(-child.pid, 'SIGKILL');
	await new Promise(resolve => child.once('close', resolve));
	const lines = readFileSync(log, 'utf8').trim().split('\n').map(line => line.split(' '));
	const code = Number(lines.find(([what]) => what === 'code')[1]);
	const forks = lines.filter(([what]) => what === 'fork').map(([, at]) => Number(at) - code);
	return {firstFork: forks[0], secondFork: forks[1]};
}

/** Workers one after another with `preload`: each one's ms to its app's first line, and to import `helper` there (0 without). */
async function workerRuns(preload, helper, count) {
	const log = path.join(scratch, 'worker.log');
	rmSync(log, {force: true});
	const primary = `import cluster from 'node:cluster';
cluster.setupPrimary({exec: ${JSON.stringify(PHASE_APP)}, execArgv: ${JSON.stringify(preload)}});
let left = ${count};
const next = () => { if (left-- > 0) cluster.fork().once('exit', next); };
next();`;
	const child = spawn(process.execPath, ['--input-type=module', '-e', primary], {env: {...env, PHASE_LOG: log, PHASE_HELPER: helper ?? ''}, stdio: 'ignore'});
	await new Promise(resolve => child.once('close', resolve));
	return readFileSync(log, 'utf8').trim().split('\n').map(line => line.split(' ').map(Number));
}

const primaries = {};
const record = (name, figures) => {
	for (const [key, value] of Object.entries(figures)) {
		((primaries[name] ??= {})[key] ??= []).push(value);
	}
};

for (let round = 0; round < ROUNDS + 1; round++) {
	for (const build of builds) {
		const run = await primaryRun([build.cli, '-w', '2', HELLO]);
		if (round > 0) {
			record(`graceful-cluster -w 2 [${build.label}]`, run);
		}
	}

	const hand = await primaryRun([CLUSTER]);
	if (round > 0) {
		record('hand-written node:cluster primary', hand);
	}
}

process.stdout.write(`node ${process.version}, ${ROUNDS} rounds; ms from the primary's first line of code\n\n| primary | to its 1st fork | to its 2nd fork |\n| --- | --- | --- |\n`);
for (const [name, figures] of Object.entries(primaries)) {
	process.stdout.write(`| ${name} | ${fmt(summary(figures.firstFork), MS)} | ${fmt(summary(figures.secondFork), MS)} |\n`);
}

process.stdout.write(`\nin a worker, one at a time (${ROUNDS} workers per build, builds in turn): ms from its process's start to its app's first line, and the app's import of the helper\n\n| build | to the app's first line | the bootstrap's share (over no preload) | then import the helper |\n| --- | --- | --- | --- |\n`);
const bare = [];
const workers = Object.fromEntries(builds.map(build => [build.label, []]));
for (let round = 0; round < ROUNDS; round++) {
	bare.push(...(await workerRuns([], undefined, 1)).map(([first]) => first));
	for (const build of builds) {
		workers[build.label].push(...await workerRuns(build.preload, build.helper, 1));
	}
}

process.stdout.write(`| no preload | ${fmt(summary(bare), MS)} | | |\n`);
for (const [label, runs] of Object.entries(workers)) {
	const shares = runs.map(([first], index) => first - bare[index]);
	process.stdout.write(`| ${label} | ${fmt(summary(runs.map(([first]) => first)), MS)} | ${fmt(summary(shares), MS)} | ${fmt(summary(runs.map(([, helper]) => helper)), MS)} |\n`);
}

rmSync(scratch, {recursive: true, force: true});
