// graceful-cluster's benchmark (issue 5). Every figure is measured beside its
// baseline in the same run, A and B alternating over several rounds; the table
// shows the median and the spread (min-max) of the per-round values.
//
//   npm run bench                 # full run, about 6-8 minutes
//   npm run bench -- --quick      # short run, about 2 minutes, fewer rounds
//   npm run bench -- --only=hello,cluster   # some figures only
//
// Needs `npm run build` at the repo root first (it runs dist/src/cli.js).
// The load generator (autocannon, in this process) shares the machine's cores
// with the servers: absolute numbers are lower than on a separate client, the
// ratios are what the figures are about.
import {execFileSync} from 'node:child_process';
import {readFileSync, writeFileSync} from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import {closeAll, openIdle, scheduleSenders, statuses, waitAllClosed} from './lib/idle.js';
import {ensureLightship} from './lib/lightship.js';
import {load} from './lib/load.js';
import {CLUSTER, HELLO, freePort, groupPids, killAll, killAllOnSignal, paths, sleep, snapshotDist, start, useDist, waitExit} from './lib/proc.js';
import {fmt, summary} from './lib/stats.js';
import {measureFilter} from './filter-micro.js';

const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const only = argv.find(arg => arg.startsWith('--only='))?.slice('--only='.length).split(',');
const FIGURES = ['filter', 'hello', 'cluster', 'reject', 'exit', 'sigterm', 'timers', 'memory', 'start', 'idle'];
const wanted = name => !only || only.includes(name);

const config = quick
	? {rounds: 4, duration: 1, warmup: 1, rejectRounds: 2, timeRounds: 3, idleConnections: 2000, rejectMs: 1000}
	: {rounds: 14, duration: 2, warmup: 2, rejectRounds: 4, timeRounds: 7, idleConnections: 10_000, rejectMs: 2000};
// A round in which other processes (a shared machine: other people's builds and
// tests) used more than this many cores during any of its runs is left out of the
// load figures, as long as at least MIN_ROUNDS remain.
const FOREIGN_MAX = 0.15;
const MIN_ROUNDS = 3;
const CONNECTIONS = 20;

const rows = [];
const notes = [];
const row = (figure, baseline, measured, goal, verdict) => {
	rows.push({figure, baseline, measured, goal, verdict});
	process.stderr.write(`  -> ${figure}: ${measured} [${verdict}]\n`);
};

const log = text => process.stderr.write(`${text}\n`);
const ratio = (a, b) => a / b;
const verdict = ok => ok ? 'met' : 'NOT met';

/** The rounds to use: those without foreign load, unless too few are left. */
function quiet(rounds, label) {
	const kept = rounds.filter(round => round.foreign <= FOREIGN_MAX);
	const used = kept.length >= MIN_ROUNDS ? kept : rounds;
	notes.push(`${label}: ${used.length} of ${rounds.length} rounds used${used === kept ? ` (left out: rounds where other processes used more than ${FOREIGN_MAX} of a core)` : ` (all: fewer than ${MIN_ROUNDS} rounds were free of other processes' load)`}; median foreign load ${summary(rounds.map(round => round.foreign)).median.toFixed(2)} cores.`);
	return used;
}

function vmRssMb(pid) {
	const status = readFileSync(`/proc/${pid}/status`, 'utf8');
	return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) / 1024;
}

function get(port, path, {timeoutMs = 10_000} = {}) {
	return new Promise((resolve, reject) => {
		const request = http.get({host: '127.0.0.1', port, path, agent: false}, response => {
			let body = '';
			response.setEncoding('utf8');
			response.on('data', chunk => {
				body += chunk;
			});
			response.on('end', () => resolve({status: response.statusCode, body, endedAt: performance.now()}));
			response.on('error', reject);
		});
		request.setTimeout(timeoutMs, () => request.destroy(new Error(`GET ${path} timed out`)));
		request.on('error', reject);
	});
}

/** graceful-cluster running bench/servers/hello.mjs with attach(). */
async function startCli(port, {workers = 2, flags = [], nodeArgs = [], stdout = 'pipe', env = {}} = {}) {
	const proc = start([paths.cli, '-w', String(workers), ...flags, HELLO], {env: {PORT: String(port), BENCH_WRAP: 'attach', ...env}, nodeArgs, stdout});
	await proc.msg('worker listening', {count: workers});
	return proc;
}

async function startCluster(port, wrap) {
	const proc = start([CLUSTER], {env: {PORT: String(port), BENCH_WRAP: wrap, WORKERS: '2'}});
	await proc.msg('worker listening', {count: 2});
	return proc;
}

async function startSingle(port, wrap, nodeArgs = []) {
	const proc = start([HELLO], {env: {PORT: String(port), BENCH_WRAP: wrap}, nodeArgs});
	await proc.msg('listening');
	return proc;
}

// --- 0. the filter alone, no sockets ------------------------------------------------
function figureFilter() {
	log('the request filter alone: 1M requests through server.emit, no sockets');
	const result = measureFilter([paths.dist], quick ? 3 : 6);
	const bare = result.bare;
	const filtered = result[paths.dist];
	row('request filter\'s own CPU cost per request (bench/filter-micro.js, no sockets)', '`server.emit(\'request\')` without the filter', `+${(filtered.median - bare.median).toFixed(0)} ns (${filtered.median.toFixed(0)} vs ${bare.median.toFixed(0)} ns per request); a hello-world request costs the server ~25-40 us of CPU`, 'not in the issue: context', 'reported');
}

// --- 1. one process: attach() vs the same server without it --------------------
async function figureHello() {
	log('hello-world, one process: attach() vs bare');
	const [portA, portB] = [await freePort(), await freePort()];
	const a = await startSingle(portA, 'attach');
	const b = await startSingle(portB, 'none');
	try {
		const targets = {attach: `http://127.0.0.1:${portA}`, bare: `http://127.0.0.1:${portB}`};
		const pids = {attach: [a.pid], bare: [b.pid]};
		for (const url of Object.values(targets)) {
			await load(url, {duration: config.warmup, connections: CONNECTIONS});
		}

		const rounds = [];
		for (let round = 0; round < config.rounds; round++) {
			const order = round % 2 === 0 ? ['attach', 'bare'] : ['bare', 'attach'];
			const result = {};
			for (const name of order) {
				result[name] = await load(targets[name], {duration: config.duration, connections: CONNECTIONS, pids: pids[name]});
			}

			rounds.push({result, foreign: Math.max(result.attach.foreign, result.bare.foreign)});
			log(`  round ${round + 1}: attach ${result.attach.rps.toFixed(0)} req/s p99 ${result.attach.p99.toFixed(2)} ms ${result.attach.cpuUs.toFixed(1)} us CPU/req; bare ${result.bare.rps.toFixed(0)} req/s p99 ${result.bare.p99.toFixed(2)} ms ${result.bare.cpuUs.toFixed(1)} us CPU/req; foreign load ${rounds.at(-1).foreign.toFixed(2)} cores`);
		}

		const used = quiet(rounds, 'one process, attach() vs bare');
		const abs = {attach: used.map(({result}) => result.attach.rps), bare: used.map(({result}) => result.bare.rps)};
		const r = summary(used.map(({result}) => ratio(result.attach.rps, result.bare.rps)));
		const p = summary(used.map(({result}) => ratio(result.attach.p99, result.bare.p99)));
		const c = summary(used.map(({result}) => ratio(result.attach.cpuUs, result.bare.cpuUs)));
		row('hello-world throughput, one process, `attach(server)`', 'same server, no helper', `${fmt(r, {unit: 'x'})}; ${summary(abs.attach).median.toFixed(0)} vs ${summary(abs.bare).median.toFixed(0)} req/s`, '>= 0.98x', verdict(r.median >= 0.98));
		row('hello-world p99 latency, one process, `attach(server)`', 'same server, no helper', fmt(p, {unit: 'x'}), '<= 1.05x', verdict(p.median <= 1.05));
		row('server CPU time per request, one process, `attach(server)` (less noisy than req/s on a shared machine)', 'same server, no helper', fmt(c, {unit: 'x'}), 'not in the issue: context', 'reported');
	} finally {
		a.stop();
		b.stop();
	}
}

// --- 2/3. two workers: the CLI vs a hand-written cluster and the alternatives ---
async function figureCluster() {
	log('hello-world, 2 workers: graceful-cluster vs node:cluster, terminus, http-terminator, lightship');
	const names = ['graceful-cluster', 'node:cluster', 'terminus', 'http-terminator', 'lightship'];
	const procs = {};
	const urls = {};
	try {
		for (const name of names) {
			const port = await freePort();
			urls[name] = `http://127.0.0.1:${port}`;
			procs[name] = name === 'graceful-cluster'
				? await startCli(port)
				: await startCluster(port, name === 'node:cluster' ? 'none' : name);
		}

		for (const name of names) {
			await load(urls[name], {duration: config.warmup, connections: CONNECTIONS});
		}

		const pids = Object.fromEntries(names.map(name => [name, groupPids(procs[name])]));
		const rounds = [];
		for (let round = 0; round < config.rounds; round++) {
			// Rotate the order so that no target always runs first or last.
			const order = names.map((_, i) => names[(i + round) % names.length]);
			const result = {};
			for (const name of order) {
				result[name] = await load(urls[name], {duration: config.duration, connections: CONNECTIONS, pids: pids[name]});
			}

			rounds.push({result, foreign: Math.max(...names.map(name => result[name].foreign))});
			log(`  round ${round + 1}: ${order.map(name => `${name} ${result[name].rps.toFixed(0)}`).join(', ')} req/s; foreign load ${rounds.at(-1).foreign.toFixed(2)} cores`);
		}

		const used = quiet(rounds, '2 workers, graceful-cluster vs node:cluster and the alternatives');
		const abs = Object.fromEntries(names.map(name => [name, used.map(({result}) => result[name].rps)]));
		const cpuAbs = Object.fromEntries(names.map(name => [name, used.map(({result}) => result[name].cpuUs)]));
		const ratios = Object.fromEntries(names.slice(1).map(name => [name, used.map(({result}) => ratio(result['graceful-cluster'].rps, result[name].rps))]));
		const cpuRatios = Object.fromEntries(names.slice(1).map(name => [name, used.map(({result}) => ratio(result['graceful-cluster'].cpuUs, result[name].cpuUs))]));

		const primaryRssAfterLoad = vmRssMb(procs['graceful-cluster'].pid);
		notes.push(`graceful-cluster primary RSS after ${config.rounds + 1} load runs through it: ${primaryRssAfterLoad.toFixed(1)} MB`);
		const base = summary(ratios['node:cluster']);
		row('throughput, `graceful-cluster -w 2`', 'hand-written `node:cluster` primary, 2 workers', `${fmt(base, {unit: 'x'})}; ${summary(abs['graceful-cluster']).median.toFixed(0)} vs ${summary(abs['node:cluster']).median.toFixed(0)} req/s`, '>= 0.98x', verdict(base.median >= 0.98));
		for (const name of ['terminus', 'http-terminator', 'lightship']) {
			const s = summary(ratios[name]);
			row(`throughput, \`graceful-cluster -w 2\` vs ${name}`, `${name} in the same 2-worker \`node:cluster\``, `${fmt(s, {unit: 'x'})}; ${summary(abs[name]).median.toFixed(0)} req/s for ${name}`, 'ahead (> 1.00x)', s.median > 1 ? (s.min > 1 ? 'met' : 'met on the median; spread crosses 1.00x') : 'NOT met');
		}

		const cpuCells = names.slice(1).map(name => `vs ${name} ${fmt(summary(cpuRatios[name]), {unit: 'x'})}`).join('; ');
		row('server CPU time per request (primary + workers), `graceful-cluster -w 2`', 'each of the four above', `${cpuCells}; ${names.map(name => `${name} ${summary(cpuAbs[name]).median.toFixed(1)} us`).join(', ')}`, 'not in the issue: context', 'reported');
	} finally {
		for (const proc of Object.values(procs)) {
			proc.stop();
		}
	}
}

// --- 4. 503s of a draining worker vs 200s of the same worker ---------------------
async function figureReject() {
	for (const level of ['info', 'debug']) {
		log(`503 rejection rate of a draining worker, log level ${level}`);
		const vsKeepAlive = [];
		const vsClose = [];
		const abs = {ka: [], close: [], rejected: []};
		let errors = 0;
		for (let round = 0; round < config.rejectRounds; round++) {
			const port = await freePort();
			const url = `http://127.0.0.1:${port}`;
			// stdout to a file: at debug every 503 is a log line, which this process
			// should not have to parse while it is generating the load.
			const proc = await startCli(port, {workers: 1, stdout: 'file', flags: ['--reject-period', '600s', '--grace-period', '700s', '--log-level', level]});
			try {
				await load(url, {duration: config.warmup, connections: CONNECTIONS});
				const ka = await load(url, {duration: config.duration, connections: CONNECTIONS});
				const close = await load(url, {duration: config.duration, connections: CONNECTIONS, headers: {connection: 'close'}});
				proc.signal('SIGTERM');
				await proc.msg('rejecting new requests');
				const rejected = await load(url, {duration: config.duration, connections: CONNECTIONS});
				errors += rejected.errors;
				const rate = rejected.rate(503);
				abs.ka.push(ka.rps);
				abs.close.push(close.rps);
				abs.rejected.push(rate);
				vsKeepAlive.push(ratio(rate, ka.rps));
				vsClose.push(ratio(rate, close.rps));
				log(`  round ${round + 1}: 503 ${rate.toFixed(0)}/s (other: ${JSON.stringify(rejected.codes)}, errors ${rejected.errors}); 200 keep-alive ${ka.rps.toFixed(0)}/s; 200 Connection: close ${close.rps.toFixed(0)}/s`);
			} finally {
				proc.stop();
			}
		}

		const a = summary(vsKeepAlive);
		const b = summary(vsClose);
		row(`503 rate of a draining worker, log level \`${level}\``, 'the same worker\'s 200s, keep-alive client (before the signal)', `${fmt(a, {unit: 'x'})}; ${summary(abs.rejected).median.toFixed(0)} vs ${summary(abs.ka).median.toFixed(0)} /s`, '>= 1.0x', verdict(a.median >= 1));
		row(`503 rate of a draining worker, log level \`${level}\``, 'the same worker\'s 200s, client sending `Connection: close` (one connection per request, like a 503)', `${fmt(b, {unit: 'x'})}; ${summary(abs.rejected).median.toFixed(0)} vs ${summary(abs.close).median.toFixed(0)} /s`, '>= 1.0x', verdict(b.median >= 1));
		if (errors > 0) {
			notes.push(`503 runs at ${level}: autocannon counted ${errors} socket errors in total`);
		}
	}
}

// --- 5. last in-flight response done -> primary exit ------------------------------
async function figureExit() {
	log('exit latency: last in-flight response done (after the reject phase) -> primary exit');
	const rejectMs = 500;
	const latencies = [];
	for (let round = 0; round < config.timeRounds; round++) {
		const port = await freePort();
		const proc = await startCli(port, {flags: ['--reject-period', `${rejectMs}ms`, '--grace-period', '10s']});
		try {
			const pending = get(port, `/slow?ms=${rejectMs + 400}`);
			await sleep(100);
			proc.signal('SIGTERM');
			const response = await pending;
			const {code} = await waitExit(proc);
			if (response.status !== 200 || code !== 0) {
				throw new Error(`exit figure: status ${response.status}, exit code ${code}`);
			}

			latencies.push(proc.exit.at - response.endedAt);
		} finally {
			proc.stop();
		}
	}

	const s = summary(latencies);
	row('exit latency: last in-flight response done (after the reject phase) -> primary exit', '-', fmt(s, {decimals: 1, unit: ' ms'}), 'median <= 50 ms', verdict(s.median <= 50));
}

// --- 6. SIGTERM -> exit, nothing in flight ----------------------------------------
async function figureSigterm() {
	log('SIGTERM -> exit with nothing in flight: --reject-period 0 vs node server.js');
	const cli = [];
	const bare = [];
	for (let round = 0; round < config.timeRounds; round++) {
		const order = round % 2 === 0 ? ['cli', 'bare'] : ['bare', 'cli'];
		for (const name of order) {
			const port = await freePort();
			const proc = name === 'cli'
				? await startCli(port, {flags: ['--reject-period', '0']})
				: await startSingle(port, 'none');
			try {
				await sleep(200);
				const at = proc.signal('SIGTERM');
				await waitExit(proc);
				(name === 'cli' ? cli : bare).push(proc.exit.at - at);
			} finally {
				proc.stop();
			}
		}
	}

	const a = summary(cli);
	const b = summary(bare);
	const diff = summary(cli.map((value, i) => value - bare[i]));
	row('SIGTERM -> exit, nothing in flight, `-w 2 --reject-period 0`', '`node server.js` dying on SIGTERM', `${fmt(a, {decimals: 1, unit: ' ms'})} vs ${fmt(b, {decimals: 1, unit: ' ms'})}; difference ${fmt(diff, {decimals: 1, unit: ' ms'})}`, 'within 100 ms', verdict(a.median - b.median <= 100));
}

// --- 7. timer accuracy ------------------------------------------------------------
async function figureTimers() {
	log('timer accuracy: serve 500ms, reject 1s, grace 2s');
	const serve = 500;
	const reject = 1000;
	const grace = 2000;
	const errors = {'drain started (worker)': [], 'rejecting new requests': [], 'stopped listening': [], 'deadline: killing worker': []};
	for (let round = 0; round < config.timeRounds; round++) {
		const port = await freePort();
		const proc = await startCli(port, {flags: ['--serve-period', `${serve}ms`, '--reject-period', `${reject}ms`, '--grace-period', `${grace}ms`]});
		try {
			get(port, '/hang').catch(() => {});
			await sleep(150);
			const wall = Date.now();
			proc.signal('SIGTERM');
			await waitExit(proc);
			const at = (msg, role) => proc.lines.filter(line => line.msg === msg && (!role || line.role === role)).map(line => line.time - wall);
			errors['drain started (worker)'].push(...at('drain started', 'worker'));
			errors['rejecting new requests'].push(...at('rejecting new requests').map(t => t - serve));
			errors['stopped listening'].push(...at('stopped listening; waiting for requests in flight').map(t => t - serve - reject));
			errors['deadline: killing worker'].push(...at('killing worker').map(t => t - grace));
		} finally {
			proc.stop();
		}
	}

	for (const [name, values] of Object.entries(errors)) {
		const s = summary(values);
		const worst = Math.max(Math.abs(s.min), Math.abs(s.max));
		row(`timer accuracy: ${name}`, 'nominal time after the signal', `${fmt(s, {decimals: 1, unit: ' ms'})} late (n=${s.n})`, 'within 50 ms', worst <= 50 ? 'met' : (Math.abs(s.median) <= 50 ? `met on the median; worst ${worst.toFixed(0)} ms` : 'NOT met'));
	}
}

// --- 8. memory --------------------------------------------------------------------
async function figureMemory() {
	log('memory: primary RSS, worker heap vs a bare process');
	const bareRss = [];
	const primaryRss = [];
	const heap = {worker: [], standalone: [], bare: []};
	const rss = {worker: [], standalone: [], bare: []};
	for (let round = 0; round < 3; round++) {
		const idle = start(['-e', 'setInterval(() => {}, 1000)'], {stdout: 'ignore'});
		const port = await freePort();
		const cli = await startCli(port, {nodeArgs: ['--expose-gc']});
		const portS = await freePort();
		const standalone = await startSingle(portS, 'attach', ['--expose-gc']);
		const portB = await freePort();
		const bare = await startSingle(portB, 'none', ['--expose-gc']);
		try {
			await sleep(500);
			bareRss.push(vmRssMb(idle.pid));
			primaryRss.push(vmRssMb(cli.pid));
			const seen = new Map();
			for (let i = 0; i < 6 && seen.size < 2; i++) {
				const m = JSON.parse((await get(port, '/mem')).body);
				seen.set(m.pid, m);
			}

			for (const m of seen.values()) {
				heap.worker.push(m.heapUsed / 1024 / 1024);
				rss.worker.push(m.rss / 1024 / 1024);
			}

			for (const [name, p] of [['standalone', portS], ['bare', portB]]) {
				const m = JSON.parse((await get(p, '/mem')).body);
				heap[name].push(m.heapUsed / 1024 / 1024);
				rss[name].push(m.rss / 1024 / 1024);
			}
		} finally {
			for (const proc of [idle, cli, standalone, bare]) {
				proc.stop();
			}
		}
	}

	const p = summary(primaryRss);
	const b = summary(bareRss);
	const mb = s => fmt(s, {decimals: 1, unit: ' MB'});
	row('primary process RSS (VmRSS), idle, `-w 2`', 'a bare `node -e` process', `${mb(p)} vs ${mb(b)}`, '<= 60 MB', verdict(p.median <= 60));
	const extraHeap = summary(heap.worker).median - summary(heap.bare).median;
	const extraHeapStandalone = summary(heap.standalone).median - summary(heap.bare).median;
	row('helper\'s extra heap per worker (heapUsed after gc)', 'the same server under bare `node`, no helper', `+${extraHeap.toFixed(2)} MB as a cluster worker (${mb(summary(heap.worker))} vs ${mb(summary(heap.bare))}); +${extraHeapStandalone.toFixed(2)} MB standalone`, 'report', 'reported');
	row('worker RSS', 'the same server under bare `node`, no helper', `${mb(summary(rss.worker))} vs ${mb(summary(rss.bare))}; standalone ${mb(summary(rss.standalone))}`, 'report', 'reported');
}

// --- 9. start time ----------------------------------------------------------------
async function figureStart() {
	log('start: CLI launch -> all workers listening vs node server.js listening');
	const cli = [];
	const bare = [];
	for (let round = 0; round < config.timeRounds; round++) {
		const order = round % 2 === 0 ? ['cli', 'bare'] : ['bare', 'cli'];
		for (const name of order) {
			const port = await freePort();
			const proc = name === 'cli' ? start([paths.cli, '-w', '2', HELLO], {env: {PORT: String(port), BENCH_WRAP: 'attach'}}) : start([HELLO], {env: {PORT: String(port), BENCH_WRAP: 'none'}});
			try {
				const line = name === 'cli' ? await proc.msg('worker listening', {count: 2}) : await proc.msg('listening');
				(name === 'cli' ? cli : bare).push(line.at - proc.spawnedAt);
			} finally {
				proc.stop();
			}
		}
	}

	const a = summary(cli);
	const b = summary(bare);
	const r = summary(cli.map((value, i) => value / bare[i]));
	row('start: CLI launch -> both workers listening, `-w 2`', '`node server.js` listening', `${fmt(r, {unit: 'x'})}; ${fmt(a, {decimals: 0, unit: ' ms'})} vs ${fmt(b, {decimals: 0, unit: ' ms'})}`, 'report the ratio', 'reported');
}

// --- 10. idle keep-alive connections at the signal --------------------------------
function fdLimit() {
	return Number(execFileSync('sh', ['-c', 'ulimit -n'], {encoding: 'utf8'}).trim());
}

async function figureIdle() {
	let count = config.idleConnections;
	const limit = fdLimit();
	// This process holds one descriptor per connection; each worker about half.
	const needed = count + 1000;
	if (limit < needed) {
		const scaled = Math.max(100, limit - 1000);
		notes.push(`ulimit -n is ${limit}: the idle-connection figure ran with ${scaled} connections instead of ${count}. Raise it (\`ulimit -n ${needed}\`) and rerun for the full figure.`);
		log(`  ulimit -n is ${limit}, below the ${needed} needed for ${count} connections: scaling down to ${scaled}. Run \`ulimit -n ${needed}\` first for the full figure.`);
		count = scaled;
	}

	const rejectMs = config.rejectMs;
	log(`${count} idle keep-alive connections at the signal, reject phase ${rejectMs} ms`);
	const port = await freePort();
	const proc = await startCli(port, {flags: ['--reject-period', `${rejectMs}ms`, '--grace-period', '30s']});
	let conns = [];
	try {
		const openStart = performance.now();
		conns = await openIdle(port, count);
		const opened = conns.filter(conn => conn.ready && conn.closedAt === undefined);
		log(`  opened ${opened.length}/${count} in ${((performance.now() - openStart) / 1000).toFixed(1)} s`);
		await sleep(500);
		const senderCount = Math.min(1000, Math.floor(opened.length / 10));
		const signalAt = proc.signal('SIGTERM');
		await proc.msg('rejecting new requests', {count: 2});
		// Senders: spread over the reject phase, away from its edges.
		const senders = opened.slice(0, senderCount);
		const times = senders.map((_, i) => signalAt + (rejectMs * (0.1 + (0.8 * i / senderCount))));
		const timers = scheduleSenders(senders, times);
		const rejectEnd = signalAt + rejectMs;
		await waitAllClosed(opened, rejectEnd + 5000);
		for (const timer of timers) {
			clearTimeout(timer);
		}

		await waitExit(proc, 30_000);
		const closedLate = opened.filter(conn => conn.closedAt === undefined || conn.closedAt - rejectEnd > 1000);
		const errored = opened.filter(conn => conn.error !== undefined);
		const senderErrors = senders.filter(conn => conn.error !== undefined);
		const got503 = senders.filter(conn => statuses(conn.text).includes(503));
		const idleOnes = opened.slice(senderCount);
		const lastIdleClose = Math.max(...idleOnes.map(conn => (conn.closedAt ?? Number.POSITIVE_INFINITY) - rejectEnd));
		const lastClose = Math.max(...opened.map(conn => (conn.closedAt ?? Number.POSITIVE_INFINITY) - rejectEnd));
		const ok = closedLate.length === 0 && senderErrors.length === 0 && got503.length === senders.length && opened.length === count;
		row(`${count} idle keep-alive connections open at the signal`, '-',
			`${opened.length - closedLate.length}/${opened.length} closed within 1 s of the reject phase's end (last idle one ${lastIdleClose.toFixed(0)} ms after it, last of all ${lastClose.toFixed(0)} ms); ${senders.length} sent a request during the reject phase: ${got503.length} got the 503, ${senderErrors.length} resets/errors; errors on all sockets: ${errored.length}${errored.length > 0 ? ` (${[...new Set(errored.map(conn => conn.error))].join(', ')})` : ''}; primary exit code ${proc.exit?.code}`,
			'all closed cleanly within 1 s, no reset on a sender', verdict(ok));
	} finally {
		closeAll(conns);
		proc.stop();
	}
}

// --- main ---------------------------------------------------------------------------
const runners = {filter: figureFilter, hello: figureHello, cluster: figureCluster, reject: figureReject, exit: figureExit, sigterm: figureSigterm, timers: figureTimers, memory: figureMemory, start: figureStart, idle: figureIdle};

async function main() {
	useDist(snapshotDist());

	ensureLightship();
	const began = performance.now();
	const failures = [];
	for (const name of FIGURES) {
		if (!wanted(name)) {
			continue;
		}

		try {
			await runners[name]();
		} catch (error) {
			failures.push(name);
			log(`figure ${name} failed: ${error.stack ?? error}`);
			rows.push({figure: name, baseline: '-', measured: `failed: ${String(error.message ?? error).replaceAll('|', '/')}`, goal: '-', verdict: 'failed'});
		} finally {
			killAll();
		}
	}

	const minutes = ((performance.now() - began) / 60_000).toFixed(1);
	const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
	const lines = [
		`graceful-cluster benchmark, ${new Date().toISOString().slice(0, 10)}: \`npm run bench${quick ? ' -- --quick' : ''}\`, ${os.availableParallelism()} cores (${cpu}), Node ${process.version}, ${os.platform()} ${os.release()}; ${minutes} min.`,
		`${quick ? 'Quick run: ' : ''}${config.rounds} rounds of ${config.duration} s per load figure (autocannon, ${CONNECTIONS} connections, after a ${config.warmup} s warm-up), ${config.rejectRounds} rounds (a fresh worker each) per log level for the 503 figure, ${config.timeRounds} rounds per timing figure; median (min-max) of the per-round values, A and B alternating in each round.`,
		'The load generator runs in the same process as the harness, on the same 2 cores as the servers: absolute req/s are lower than with a separate client; the ratios compare like with like.',
		'',
		'| figure | baseline measured beside it | measured: median (min-max) | goal | verdict |',
		'| --- | --- | --- | --- | --- |',
		...rows.map(r => `| ${r.figure} | ${r.baseline} | ${r.measured} | ${r.goal} | ${r.verdict} |`),
	];
	if (notes.length > 0) {
		lines.push('', ...notes.map(note => `- ${note}`));
	}

	const text = lines.join('\n');
	process.stdout.write(`${text}\n`);
	writeFileSync(new URL(`results-${quick ? 'quick' : 'full'}.md`, import.meta.url), `${text}\n`);
	if (failures.length > 0) {
		process.exitCode = 1;
	}
}

killAllOnSignal();
try {
	await main();
} finally {
	killAll();
}
