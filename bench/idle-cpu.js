// CPU an idle cluster burns: `graceful-cluster -w 2` (app with attach(), with
// and without --metrics, nothing scraping it or a scrape every second) vs a hand-written node:cluster
// primary running the same app without the helper, each left alone for a
// while once both workers listen. What `top` shows for a service at rest.
//
//   node bench/idle-cpu.js [--rounds 3] [--seconds 10] [--cli name=file ...]
//
// --cli adds a case: another build's CLI (its dist/bundle/cli.cjs), -w 2, the
// same app, to measure a change side by side in one run.
//
// Each round starts every case in turn (the order rotates), waits 2 s after the
// workers listen, then counts the CPU of the whole process group (every process
// and thread, from /proc) over --seconds. Medians (min-max) in ms of CPU per
// second. Run after `npm run build`, with nothing else on the machine.
import http from 'node:http';
import process from 'node:process';
import {parseArgs} from 'node:util';
import {CLUSTER, cpuNs, freePort, groupPids, HELLO, killAllOnSignal, paths, sleep, start, useDist} from './lib/proc.js';
import {fmt, summary} from './lib/stats.js';

const {values: flags} = parseArgs({options: {
	rounds: {type: 'string', default: '3'},
	seconds: {type: 'string', default: '10'},
	cli: {type: 'string', multiple: true, default: []},
}});
const ROUNDS = Number(flags.rounds);
const SECONDS = Number(flags.seconds);
killAllOnSignal();
useDist(new URL('../dist', import.meta.url).pathname);

const CASES = {
	'graceful-cluster -w 2, app with attach()': async () => ({args: [paths.cli, '-w', '2', HELLO], env: {BENCH_WRAP: 'attach'}}),
	'graceful-cluster -w 2 --metrics, app with attach()': async () => ({args: [paths.cli, '-w', '2', '--metrics', `127.0.0.1:${await freePort()}`, HELLO], env: {BENCH_WRAP: 'attach'}}),
	'graceful-cluster -w 2 --metrics, scraped every second': async () => {
		const metricsPort = await freePort();
		return {args: [paths.cli, '-w', '2', '--metrics', `127.0.0.1:${metricsPort}`, HELLO], env: {BENCH_WRAP: 'attach'}, metricsPort};
	},
	'hand-written node:cluster primary, 2 workers': async () => ({args: [CLUSTER], env: {BENCH_WRAP: 'none', WORKERS: '2'}}),
};
for (const option of flags.cli) {
	const [name, file] = option.split('=');
	if (!name || !file) {
		throw new Error(`--cli ${option}: expected name=path/to/cli.cjs`);
	}

	CASES[`graceful-cluster -w 2, app with attach() (${name})`] = async () => ({args: [file, '-w', '2', HELLO], env: {BENCH_WRAP: 'attach'}});
}

/** ms of CPU per second the case's process group used at rest. */
async function idleCpu(make) {
	const {args, env, metricsPort} = await make();
	const proc = start(args, {env: {PORT: '0', ...env}});
	const scrape = () => http.get({host: '127.0.0.1', port: metricsPort, path: '/metrics', agent: false}, response => response.resume()).on('error', () => {});
	const scraping = metricsPort === undefined ? undefined : setInterval(scrape, 1000);
	try {
		await proc.msg('worker listening', {count: 2});
		await sleep(2000);
		const before = cpuNs(groupPids(proc));
		await sleep(SECONDS * 1000);
		return (cpuNs(groupPids(proc)) - before) / 1e6 / SECONDS;
	} finally {
		clearInterval(scraping);
		proc.stop();
	}
}

const names = Object.keys(CASES);
const results = Object.fromEntries(names.map(name => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
	for (let i = 0; i < names.length; i++) {
		const name = names[(round + i) % names.length];
		results[name].push(await idleCpu(CASES[name]));
	}
}

process.stdout.write(`idle CPU, ms per second, ${ROUNDS} rounds of ${SECONDS} s, node ${process.version}\n| case | median (min-max) |\n| --- | --- |\n`);
for (const name of names) {
	process.stdout.write(`| ${name} | ${fmt(summary(results[name]), {decimals: 1})} |\n`);
}
