// The hot path, as CPU time per request (issue 21, item 2): the server processes'
// own CPU (user + system, every thread, from /proc in ns) over a fixed number of
// requests, A and B alternating round by round. On a shared 2-core machine
// req/s of the same build spread by ±30 % between rounds; CPU per request moves
// far less, because it does not count the time a server waited for a core.
// Throughput and p99 are printed beside it, marked noisy.
//
//   protocols: one process, attach() vs the same server without it, for HTTP/1.1
//              keep-alive, a new HTTP/1.1 connection per request, HTTP/2 streams
//              (h2c) and WebSocket messages. The server is pinned to one core and
//              this process (the client) to the other, so that neither steals
//              the other's core mid-run.
//   cluster:   `graceful-cluster -w 2` (primary + workers) vs a hand-written
//              node:cluster primary running the same app, with and without
//              --metrics scraped every second; terminus, http-terminator and
//              lightship in the same hand-written cluster for comparison.
//
//   node bench/hot-path.js [--quick] [--only=protocols,cluster] [--cases=keep-alive,new-connection,h2c,websocket] [--rounds=N]
//
// perf.js (`npm run bench`) runs both as part of the full table.
import {execFileSync} from 'node:child_process';
import http from 'node:http';
import os from 'node:os';
import process from 'node:process';
import {h2, http1, wsEcho} from './lib/clients.js';
import {ensureLightship} from './lib/lightship.js';
import {CLUSTER, HELLO, cpuNs, freePort, groupPids, killAll, killAllOnSignal, machineBusyMs, paths, snapshotDist, start, useDist} from './lib/proc.js';
import {createReport, log, verdict} from './lib/report.js';
import {fmt, percentile, summary} from './lib/stats.js';

const PROTOCOLS = new URL('servers/protocols.mjs', import.meta.url).pathname;

/** The figures' sizes: requests per run are fixed, so every run does the same work. */
export const hotPathConfig = quick => ({
	rounds: quick ? 4 : 10,
	// About 1-2 s of server CPU per run at the rates seen on 2 cores.
	scale: quick ? 0.5 : 1,
});

const PROTOCOL_CASES = [
	{id: 'keep-alive', name: 'HTTP/1.1 keep-alive (20 connections)', proto: 'http1', total: 40_000, send: (port, total) => http1({port, total, concurrency: 20})},
	{id: 'new-connection', name: 'HTTP/1.1, a new connection per request (20 at a time)', proto: 'http1', total: 8000, send: (port, total) => http1({port, total, concurrency: 20, keepAlive: false})},
	{id: 'h2c', name: 'HTTP/2 streams, h2c (10 sessions x 2 streams)', proto: 'h2c', total: 30_000, send: (port, total) => h2({port, total, sessions: 10, streams: 2})},
	{id: 'websocket', name: 'WebSocket echo messages (20 sockets)', proto: 'ws', total: 60_000, send: (port, total) => wsEcho({port, total, sockets: 20})},
];

/** `taskset` to one core, every thread of `pid`; false where it cannot (one core, no taskset). */
function pin(pid, cpus) {
	try {
		execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], {stdio: 'ignore'});
		return true;
	} catch {
		return false;
	}
}

/**
 * One measured run: the server `pids`' CPU over `send()`, in us per answered
 * request; req/s, p99 (ms) and the CPU other processes used meanwhile ("foreign",
 * in cores: other people's builds and tests on a shared machine).
 */
async function measured(pids, send, expected) {
	const cpuBefore = cpuNs(pids);
	const busyBefore = machineBusyMs();
	const selfBefore = process.cpuUsage();
	const result = await send();
	const cpu = cpuNs(pids) - cpuBefore;
	const self = process.cpuUsage(selfBefore);
	const busy = machineBusyMs() - busyBefore;
	const foreign = Math.max(0, busy - (cpu / 1e6) - ((self.user + self.system) / 1000)) / (result.seconds * 1000);
	if (result.ok !== expected || result.errors > 0) {
		throw new Error(`expected ${expected} answers with a 2xx, got ${result.ok} (statuses ${JSON.stringify(result.statuses)}, ${result.errors} errors)`);
	}

	return {cpuUs: cpu / 1000 / result.ok, rps: result.ok / result.seconds, p99: percentile(result.latencies, 99), foreign};
}

/**
 * Runs every target once per round, rotating the order; `targets`: name ->
 * `run()`, which starts a fresh server, measures, and stops it. Fresh processes
 * each round: two processes of the same build, side by side, differ by up to
 * 5 % for the whole of their lives (memory layout, JIT decisions), more than
 * the differences looked for here; over many processes that evens out.
 */
async function alternate(targets, rounds, label, describe) {
	const names = Object.keys(targets);
	const all = [];
	for (let round = 0; round < rounds; round++) {
		const order = names.map((_, i) => names[(i + round) % names.length]);
		const result = {};
		for (const name of order) {
			// One at a time by design: two loads at once would share the cores.
			// eslint-disable-next-line no-await-in-loop
			result[name] = await targets[name]();
		}

		all.push({result, foreign: Math.max(...names.map(name => result[name].foreign))});
		log(`  ${label} round ${round + 1}: ${describe(result)}; foreign load ${all.at(-1).foreign.toFixed(2)} cores`);
	}

	return all;
}

const ratios = (rounds, a, b, key) => summary(rounds.map(({result}) => result[a][key] / result[b][key]));
const median = (rounds, name, key) => summary(rounds.map(({result}) => result[name][key])).median;
const noisy = (rounds, a, b) => `noisy: req/s ${fmt(ratios(rounds, a, b, 'rps'), {unit: 'x'})} (${median(rounds, a, 'rps').toFixed(0)} vs ${median(rounds, b, 'rps').toFixed(0)}), p99 ${fmt(ratios(rounds, a, b, 'p99'), {unit: 'x'})}`;

/**
 * Starts `args`, waits for what `ready(proc)` waits for (it returns the port and
 * any extra), warms it up with as much load as the run, measures one run, stops
 * it. `during(extra)` runs through warm-up and run alike (its stop function is
 * called at the end): a scraper's first, costlier scrapes fall in the warm-up.
 */
async function freshRun(args, env, {ready, pinTo, total, send, during = () => () => {}}) {
	const proc = start(args, {env});
	let stop = () => {};
	try {
		const {port, ...extra} = await ready(proc);
		const pids = groupPids(proc);
		if (pinTo) {
			pin(proc.pid, pinTo);
		}

		stop = during(extra);
		// The JIT settles before anything is counted.
		await send(port, total);
		return await measured(pids, () => send(port, total), total);
	} finally {
		stop();
		proc.stop();
	}
}

/** attach() vs bare, one process per variant, per protocol. */
export async function figureProtocols(report, {rounds, scale, cases}) {
	const cores = os.availableParallelism();
	const pinned = cores >= 2 && pin(process.pid, '0');
	report.note(pinned
		? 'CPU per request, one process: the server was pinned to core 1 (`taskset`) and the client (this process) to core 0; a fresh server process for every run, warmed up with as many requests as the run.'
		: 'CPU per request, one process: not pinned (one core, or no `taskset`); a fresh server process for every run, warmed up with as many requests as the run.');
	try {
		for (const testCase of PROTOCOL_CASES.filter(({id}) => !cases || cases.includes(id))) {
			log(`CPU per request, one process, attach() vs bare: ${testCase.name}`);
			const total = Math.round(testCase.total * scale);
			const run = wrap => () => freshRun([PROTOCOLS], {PORT: '0', BENCH_PROTO: testCase.proto, BENCH_WRAP: wrap}, {
				ready: proc => proc.msg('listening'),
				pinTo: pinned ? String(cores - 1) : undefined,
				total,
				send: testCase.send,
			});
			const all = await alternate({attach: run('attach'), bare: run('none')}, rounds, testCase.id, result => `attach ${result.attach.cpuUs.toFixed(2)} us, bare ${result.bare.cpuUs.toFixed(2)} us CPU/req`);
			const used = report.quiet(all, `attach() vs bare, ${testCase.name}`);
			const cpu = ratios(used, 'attach', 'bare', 'cpuUs');
			report.row(`server CPU per request, one process, \`attach(server)\`: ${testCase.name}, ${total} per run`, 'same server, no helper',
				`${fmt(cpu, {unit: 'x'})}; ${median(used, 'attach', 'cpuUs').toFixed(2)} vs ${median(used, 'bare', 'cpuUs').toFixed(2)} us; ${noisy(used, 'attach', 'bare')}`,
				'<= 1.03x', verdict(cpu.median <= 1.03));
		}
	} finally {
		if (pinned) {
			pin(process.pid, `0-${cores - 1}`);
		}
	}
}

function scrapeEverySecond({metricsPort}) {
	const scrape = () => http.get({host: '127.0.0.1', port: metricsPort, path: '/metrics', agent: false}, response => response.resume()).on('error', () => {});
	scrape();
	const timer = setInterval(scrape, 1000);
	return () => clearInterval(timer);
}

/** The whole cluster (primary + workers): graceful-cluster vs a hand-written one, and the alternatives. */
export async function figureCluster(report, {rounds, scale}) {
	ensureLightship();
	log('CPU per request, 2 workers: graceful-cluster (with and without --metrics) vs node:cluster, terminus, http-terminator, lightship');
	const total = Math.round(60_000 * scale);
	const listening = async proc => {
		await proc.msg('worker listening', {count: 2});
		return {};
	};

	const withMetrics = async proc => {
		await listening(proc);
		const {address} = await proc.msg('serving metrics');
		return {metricsPort: Number(address.split(':').at(-1))};
	};

	// --metrics takes a port of its own (0 is refused); found afresh per run.
	const metricsFlag = async () => ['--metrics', `127.0.0.1:${await freePort()}`];

	const specs = {
		'graceful-cluster': {args: [paths.cli, '-w', '2', HELLO], wrap: 'attach'},
		'graceful-cluster --metrics': {args: [paths.cli, '-w', '2', HELLO], flags: metricsFlag, wrap: 'attach', ready: withMetrics, during: scrapeEverySecond},
		'node:cluster': {args: [CLUSTER], wrap: 'none'},
		terminus: {args: [CLUSTER], wrap: 'terminus'},
		'http-terminator': {args: [CLUSTER], wrap: 'http-terminator'},
		lightship: {args: [CLUSTER], wrap: 'lightship'},
	};
	const targets = {};
	for (const [name, spec] of Object.entries(specs)) {
		targets[name] = async () => {
			const port = await freePort();
			const args = spec.flags ? [...spec.args.slice(0, -1), ...await spec.flags(), spec.args.at(-1)] : spec.args;
			return freshRun(args, {PORT: String(port), WORKERS: '2', BENCH_WRAP: spec.wrap}, {
				ready: async proc => ({port, ...await (spec.ready ?? listening)(proc)}),
				total,
				send: (_, count) => http1({port, total: count, concurrency: 20}),
				during: spec.during,
			});
		};
	}

	const all = await alternate(targets, rounds, 'cluster', result => Object.entries(result).map(([name, r]) => `${name} ${r.cpuUs.toFixed(1)} us`).join(', '));
	const used = report.quiet(all, '2 workers, graceful-cluster vs node:cluster and the alternatives');
	for (const name of ['graceful-cluster', 'graceful-cluster --metrics']) {
		const cpu = ratios(used, name, 'node:cluster', 'cpuUs');
		report.row(`server CPU per request (primary + workers), ${name === 'graceful-cluster' ? '`graceful-cluster -w 2`' : '`graceful-cluster -w 2 --metrics`, scraped every second'}, HTTP/1.1 keep-alive, ${total} per run`,
			'hand-written `node:cluster` primary, 2 workers, the same app without the helper',
			`${fmt(cpu, {unit: 'x'})}; ${median(used, name, 'cpuUs').toFixed(2)} vs ${median(used, 'node:cluster', 'cpuUs').toFixed(2)} us; ${noisy(used, name, 'node:cluster')}`,
			'<= 1.05x', verdict(cpu.median <= 1.05));
	}

	const others = ['terminus', 'http-terminator', 'lightship'];
	report.row('server CPU per request (primary + workers), `graceful-cluster -w 2` vs the alternatives', 'each in the same hand-written 2-worker `node:cluster`',
		others.map(name => `vs ${name} ${fmt(ratios(used, 'graceful-cluster', name, 'cpuUs'), {unit: 'x'})} (${median(used, name, 'cpuUs').toFixed(2)} us; ${noisy(used, 'graceful-cluster', name)})`).join('; '),
		'not in the issue: context', 'reported');
}

// Run alone: `node bench/hot-path.js [--quick] [--only=protocols,cluster]`.
if (import.meta.url === `file://${process.argv[1]}`) {
	const argv = process.argv.slice(2);
	const only = argv.find(arg => arg.startsWith('--only='))?.slice('--only='.length).split(',');
	const value = name => argv.find(arg => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
	const config = {...hotPathConfig(argv.includes('--quick')), cases: value('cases')?.split(',')};
	if (value('rounds')) {
		config.rounds = Number(value('rounds'));
	}

	const report = createReport();
	killAllOnSignal();
	useDist(snapshotDist('hot-path'));
	try {
		if (!only || only.includes('protocols')) {
			await figureProtocols(report, config);
		}

		if (!only || only.includes('cluster')) {
			await figureCluster(report, config);
		}
	} finally {
		killAll();
	}

	process.stdout.write(`${report.markdown()}\n`);
}
