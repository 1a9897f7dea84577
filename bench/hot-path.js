// The hot path, as CPU time per request (issue 21, item 2): the server processes'
// own CPU (user + system, every thread, from /proc in ns) over a fixed number of
// requests; every round starts fresh processes and has them take turns (see
// `round`), and the figure is the median of the per-round ratios. On a shared 2-core machine
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
//   node bench/hot-path.js [--quick] [--only=protocols,cluster,cluster-new-connection] [--cases=keep-alive,new-connection,h2c,websocket] [--rounds=N] [--worker=name=file ...] [--cli=name=file ...] [--twin]
//
// cluster-new-connection: the cluster figure with a new connection per request, so each goes
// through the primary's round-robin hand-off. --cli adds another build of the CLI (its
// bundle/cli.cjs) to the cluster figures' rounds.
// --worker adds another build of the helper (its worker/index.js) to the same rounds of the
// one-process figures: what a change to the hot path costs, measured beside the current one.
// --twin adds a second process of the same build (`attach`, `graceful-cluster`) to
// every figure's rounds, and prints the two against each other: what the run
// resolves (about ±3 % here). The full run (perf.js) always has it.
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

export const PROTOCOLS = new URL('servers/protocols.mjs', import.meta.url).pathname;

/** The figures' sizes: requests per round are fixed, so every round does the same work. */
export const hotPathConfig = quick => ({
	rounds: quick ? 4 : 10,
	// About 1-2 s of server CPU per target and round at the rates seen on 2 cores.
	scale: quick ? 0.5 : 1,
	// A twin beside the target (see TWIN): the run's own resolution, printed beside its figures.
	twin: !quick,
});

/**
 * The target's twin: the same build, in a process of its own, in the same
 * rounds. Against each other the two measure what this run can tell apart at
 * all: a figure within that distance of its goal is on the line, not over it.
 */
const TWIN = 'twin';
const twinNote = (report, what, all, name) => {
	report.note(`${what}: \`${name}\` against its twin (the same build, a second process in the same rounds) ${fmt(ratios(all, name, TWIN, 'cpuUs'), {unit: 'x'})}: the run's resolution for this figure`);
};

export const PROTOCOL_CASES = [
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

/** `items` starting at the `turn`-th, round the ring. */
export const inTurn = (items, turn) => items.map((_, i) => items[(i + turn) % items.length]);

/** Chunks per target and round: A and B take turns this often, so a drift of the machine's speed reaches both alike. */
const CHUNKS = 8;

/**
 * One round: starts every target afresh (`spec`: args, env, ready(proc) ->
 * {port, ...extra}, pinTo, send(port, count), during(extra) -> stop), warms
 * each up with as many requests as it will be measured on, then measures them
 * in CHUNKS turns each, the order rotating. Per target: server CPU (its whole
 * process group, every thread, in ns) per answered request, req/s, p99 (ms),
 * and the CPU other processes used meanwhile ("foreign", in cores: other
 * people's builds and tests on a shared machine).
 *
 * Fresh processes every round: two processes of the same build, side by side,
 * differ by up to 5 % for the whole of their lives (memory layout, JIT
 * decisions), more than the differences looked for here; over many processes
 * that evens out. Turns within a round: this VM's speed drifts by up to 2x
 * within seconds, and a run of A then a run of B would take that for a difference.
 */
async function round(specs, total, index = 0) {
	const live = {};
	try {
		// Which target starts first, and so takes the first turn, rotates from round to
		// round. The order is kept as a list: an object's keys list number-like names
		// (`--worker 2=...`) first, whatever order they came in.
		const names = inTurn(Object.keys(specs), index);
		for (const name of names) {
			const spec = specs[name];
			const proc = start(spec.args, {env: spec.env});
			live[name] = {spec, proc, stop: () => {}};
			const {port, ...extra} = await spec.ready(proc);
			if (spec.pinTo) {
				pin(proc.pid, spec.pinTo);
			}

			Object.assign(live[name], {port, pids: groupPids(proc), stop: spec.during?.(extra) ?? (() => {})});
		}

		const allPids = names.flatMap(name => live[name].pids);
		const per = Math.round(total / CHUNKS);
		// The warm-up takes turns too, chunk by chunk, as the measured runs do. Warmed
		// up one after the other, the first target sat idle the longest before its
		// first measured turn and came out 5-8 % dearer per request than an
		// identical build (h2c, 4 identical or near-identical targets, 6-8 rounds,
		// at bd6b5bb); in turns, identical builds measure within 3 % of each other.
		for (let chunk = 0; chunk < CHUNKS; chunk++) {
			for (const name of inTurn(names, chunk)) {
				await live[name].spec.send(live[name].port, per);
			}
		}

		const sums = Object.fromEntries(names.map(name => [name, {cpuNs: 0, ok: 0, seconds: 0, latencies: [], foreignMs: 0}]));
		for (let chunk = 0; chunk < CHUNKS; chunk++) {
			for (const name of inTurn(names, chunk)) {
				const {spec, port, pids} = live[name];
				const sum = sums[name];
				const cpuBefore = cpuNs(pids);
				// The targets waiting for their turn are not foreign: their idle CPU
				// (heartbeats, a scraper's scrapes) is ours to leave out.
				const allBefore = cpuNs(allPids);
				const busyBefore = machineBusyMs();
				const selfBefore = process.cpuUsage();
				// One at a time by design: two loads at once would share the cores.
				const result = await spec.send(port, per);
				const cpu = cpuNs(pids) - cpuBefore;
				const all = cpuNs(allPids) - allBefore;
				const self = process.cpuUsage(selfBefore);
				const busy = machineBusyMs() - busyBefore;
				if (result.ok !== per || result.errors > 0) {
					throw new Error(`${name}: expected ${per} answers with a 2xx, got ${result.ok} (statuses ${JSON.stringify(result.statuses)}, ${result.errors} errors)`);
				}

				sum.cpuNs += cpu;
				sum.ok += result.ok;
				sum.seconds += result.seconds;
				sum.latencies.push(result.latencies);
				sum.foreignMs += Math.max(0, busy - (all / 1e6) - ((self.user + self.system) / 1000));
			}
		}

		return Object.fromEntries(names.map(name => {
			const sum = sums[name];
			const latencies = Float64Array.from(sum.latencies.flatMap(values => [...values])).sort();
			return [name, {cpuUs: sum.cpuNs / 1000 / sum.ok, rps: sum.ok / sum.seconds, p99: percentile(latencies, 99), foreign: sum.foreignMs / (sum.seconds * 1000)}];
		}));
	} finally {
		for (const {stop, proc} of Object.values(live)) {
			stop();
			proc.stop();
		}
	}
}

/** `rounds` rounds of `specs` (`first`: the round's index, for the start order); each round's results and the most foreign load any target saw in it. */
async function alternate(specs, {rounds, total, label, describe, first = 0}) {
	const all = [];
	for (let index = 0; index < rounds; index++) {
		const result = await round(specs, total, first + index);
		all.push({result, foreign: Math.max(...Object.values(result).map(r => r.foreign))});
		log(`  ${label} round ${index + 1}: ${describe(result)}; foreign load ${all.at(-1).foreign.toFixed(2)} cores`);
	}

	return all;
}

const ratios = (rounds, a, b, key) => summary(rounds.map(({result}) => result[a][key] / result[b][key]));
const median = (rounds, name, key) => summary(rounds.map(({result}) => result[name][key])).median;
const noisy = (rounds, a, b) => `noisy: req/s ${fmt(ratios(rounds, a, b, 'rps'), {unit: 'x'})} (${median(rounds, a, 'rps').toFixed(0)} vs ${median(rounds, b, 'rps').toFixed(0)}), p99 ${fmt(ratios(rounds, a, b, 'p99'), {unit: 'x'})}`;

/** attach() vs bare, one process per variant, per protocol. */
export async function figureProtocols(report, {rounds, scale, cases, workers = {}, twin = false}) {
	const cores = os.availableParallelism();
	const pinned = cores >= 2 && pin(process.pid, '0');
	report.note(pinned
		? 'CPU per request, one process: the server was pinned to core 1 (`taskset`) and the client (this process) to core 0; fresh server processes every round, each warmed up with as many requests as it is measured on.'
		: 'CPU per request, one process: not pinned (one core, or no `taskset`); fresh server processes every round, each warmed up with as many requests as it is measured on.');
	try {
		for (const testCase of PROTOCOL_CASES.filter(({id}) => !cases || cases.includes(id))) {
			log(`CPU per request, one process, attach() vs bare: ${testCase.name}`);
			const total = Math.round(testCase.total * scale);
			const server = (wrap, worker) => ({
				args: [PROTOCOLS],
				env: {PORT: '0', BENCH_PROTO: testCase.proto, BENCH_WRAP: wrap, ...(worker ? {BENCH_WORKER: worker} : {})},
				ready: proc => proc.msg('listening'),
				pinTo: pinned ? String(cores - 1) : undefined,
				send: testCase.send,
			});
			// --worker name=file: other builds of the helper in the same rounds (what a change to it costs).
			const others = Object.fromEntries(Object.entries(workers).map(([name, file]) => [name, server('attach', file)]));
			const all = await alternate({attach: server('attach'), bare: server('none'), ...(twin ? {[TWIN]: server('attach')} : {}), ...others}, {rounds, total, label: testCase.id, describe: result => Object.entries(result).map(([name, r]) => `${name} ${r.cpuUs.toFixed(2)} us`).join(', ')});
			for (const name of Object.keys(others)) {
				report.note(`${testCase.name}: --worker ${name} vs bare ${fmt(ratios(all, name, 'bare', 'cpuUs'), {unit: 'x'})}, vs attach ${fmt(ratios(all, name, 'attach', 'cpuUs'), {unit: 'x'})}`);
			}

			if (twin) {
				twinNote(report, testCase.name, all, 'attach');
			}

			const used = report.quiet(all, `attach() vs bare, ${testCase.name}`);
			const cpu = ratios(used, 'attach', 'bare', 'cpuUs');
			report.row(`server CPU per request, one process, \`attach(server)\`: ${testCase.name}, ${total} per round`, 'same server, no helper',
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
	// All round long; what falls in this cluster's own turns is counted, one scrape a second.
	scrape();
	const timer = setInterval(scrape, 1000);
	return () => clearInterval(timer);
}

/**
 * The whole cluster (primary + workers): graceful-cluster vs a hand-written one,
 * and the alternatives. `newConnection`: each request on a connection of its
 * own, so node:cluster's round-robin hands each to a worker through the primary
 * (graceful-cluster and node:cluster only); `clis` adds other builds of the CLI
 * (name: its cli.cjs) to the same rounds.
 */
export async function figureCluster(report, {rounds, scale, twin = false, newConnection = false, clis = {}}) {
	ensureLightship();
	log(newConnection
		? 'CPU per request, 2 workers, a new connection per request: graceful-cluster vs node:cluster'
		: 'CPU per request, 2 workers: graceful-cluster (with and without --metrics) vs node:cluster, terminus, http-terminator, lightship');
	const total = Math.round((newConnection ? 12_000 : 60_000) * scale);
	const listening = async proc => {
		await proc.msg('worker listening', {count: 2});
		return {};
	};

	const withMetrics = async proc => {
		await listening(proc);
		const {address} = await proc.msg('serving metrics');
		return {metricsPort: Number(address.split(':').at(-1))};
	};

	// --metrics takes a port of its own (0 is refused); found afresh each round.
	const metricsFlag = async () => ['--metrics', `127.0.0.1:${await freePort()}`];

	const specs = newConnection
		? {
			'graceful-cluster': {args: [paths.cli, '-w', '2', HELLO], wrap: 'attach'},
			'node:cluster': {args: [CLUSTER], wrap: 'none'},
		}
		: {
			'graceful-cluster': {args: [paths.cli, '-w', '2', HELLO], wrap: 'attach'},
			'graceful-cluster --metrics': {args: [paths.cli, '-w', '2', HELLO], flags: metricsFlag, wrap: 'attach', ready: withMetrics, during: scrapeEverySecond},
			'node:cluster': {args: [CLUSTER], wrap: 'none'},
			terminus: {args: [CLUSTER], wrap: 'terminus'},
			'http-terminator': {args: [CLUSTER], wrap: 'http-terminator'},
			lightship: {args: [CLUSTER], wrap: 'lightship'},
		};
	for (const [name, cli] of Object.entries(clis)) {
		specs[name] = {args: [cli, '-w', '2', HELLO], wrap: 'attach'};
		if (!newConnection) {
			specs[`${name} --metrics`] = {...specs['graceful-cluster --metrics'], args: [cli, '-w', '2', HELLO]};
		}
	}

	if (twin) {
		specs[TWIN] = specs['graceful-cluster'];
	}

	// Each round: a port per target (and one for --metrics), found afresh.
	const roundSpecs = async () => {
		const result = {};
		for (const [name, spec] of Object.entries(specs)) {
			const port = await freePort();
			const args = spec.flags ? [...spec.args.slice(0, -1), ...await spec.flags(), spec.args.at(-1)] : spec.args;
			result[name] = {
				args,
				env: {PORT: String(port), WORKERS: '2', BENCH_WRAP: spec.wrap},
				ready: async proc => ({port, ...await (spec.ready ?? listening)(proc)}),
				send: (_, count) => http1({port, total: count, concurrency: 20, keepAlive: !newConnection}),
				during: spec.during,
			};
		}

		return result;
	};

	const all = [];
	for (let index = 0; index < rounds; index++) {
		const [result] = (await alternate(await roundSpecs(), {rounds: 1, first: index, total, label: `cluster ${index + 1}/${rounds}`, describe: r => Object.entries(r).map(([name, {cpuUs}]) => `${name} ${cpuUs.toFixed(1)} us`).join(', ')}));
		all.push(result);
	}

	const used = report.quiet(all, '2 workers, graceful-cluster vs node:cluster and the alternatives');
	if (twin) {
		twinNote(report, '2 workers', used, 'graceful-cluster');
	}

	for (const name of Object.keys(clis)) {
		for (const flags of newConnection ? [''] : ['', ' --metrics']) {
			report.row(`server CPU per request (primary + workers), \`graceful-cluster -w 2${flags}\` beside the build ${name}, ${newConnection ? 'a new connection per request' : 'HTTP/1.1 keep-alive'}`, name + flags,
				`${fmt(ratios(used, `graceful-cluster${flags}`, name + flags, 'cpuUs'), {unit: 'x'})}; ${median(used, `graceful-cluster${flags}`, 'cpuUs').toFixed(2)} vs ${median(used, name + flags, 'cpuUs').toFixed(2)} us; ${noisy(used, `graceful-cluster${flags}`, name + flags)}`,
				'not in the issue: context', 'reported');
		}
	}

	if (newConnection) {
		const cpu = ratios(used, 'graceful-cluster', 'node:cluster', 'cpuUs');
		report.row(`server CPU per request (primary + workers), \`graceful-cluster -w 2\`, HTTP/1.1, a new connection per request (20 at a time), ${total} per round`,
			'hand-written `node:cluster` primary, 2 workers, the same app without the helper',
			`${fmt(cpu, {unit: 'x'})}; ${median(used, 'graceful-cluster', 'cpuUs').toFixed(2)} vs ${median(used, 'node:cluster', 'cpuUs').toFixed(2)} us; ${noisy(used, 'graceful-cluster', 'node:cluster')}`,
			'<= 1.05x', verdict(cpu.median <= 1.05));
		return;
	}

	for (const name of ['graceful-cluster', 'graceful-cluster --metrics']) {
		const cpu = ratios(used, name, 'node:cluster', 'cpuUs');
		report.row(`server CPU per request (primary + workers), ${name === 'graceful-cluster' ? '`graceful-cluster -w 2`' : '`graceful-cluster -w 2 --metrics`, scraped every second'}, HTTP/1.1 keep-alive, ${total} per round`,
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
	const named = flag => Object.fromEntries(argv.filter(arg => arg.startsWith(`--${flag}=`)).map(arg => arg.slice(flag.length + 3).split(/=(.*)/s)));
	// Alone, a twin only when asked for (--twin): it makes the run half as long again.
	const config = {...hotPathConfig(argv.includes('--quick')), cases: value('cases')?.split(','), workers: named('worker'), clis: named('cli'), twin: argv.includes('--twin')};
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

		if (!only || only.includes('cluster-new-connection')) {
			await figureCluster(report, {...config, newConnection: true});
		}
	} finally {
		killAll();
	}

	process.stdout.write(`${report.markdown()}\n`);
}
