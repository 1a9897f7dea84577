// graceful-cluster's benchmark (issue 5). Every figure is measured beside its
// baseline in the same run, A and B alternating over several rounds; the table
// shows the median and the spread (min-max) of the per-round values.
//
//   npm run bench                 # full run, about 25 minutes on 2 cores (with valgrind installed)
//   npm run bench -- --quick      # short run, about 4 minutes, fewer rounds, no twins
//   npm run bench -- --only=hello,cluster   # some figures only
//   npm run bench -- --only=rebalance,overload   # capacity: connection age and overload (capacity.js), about 3 minutes
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
import {figureOverload, figureRebalance} from './capacity.js';
import {figureCluster, figureProtocols, hotPathConfig} from './hot-path.js';
import {figureInstructions} from './instructions.js';
import {closeAll, openIdle, scheduleSenders, statuses, waitAllClosed} from './lib/idle.js';
import {load} from './lib/load.js';
import {CLUSTER, HELLO, ROOT, freePort, groupPids, killAll, killAllOnSignal, paths, sleep, snapshotDist, start, useDist, waitExit} from './lib/proc.js';
import {createReport, log, verdict} from './lib/report.js';
import {flagCases, measure as measureStart, startCases} from './lib/startup.js';
import {fmt, summary} from './lib/stats.js';
import {measureFilter} from './filter-micro.js';

const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const only = argv.find(arg => arg.startsWith('--only='))?.slice('--only='.length).split(',');
const FIGURES = ['filter', 'protocols', 'instructions', 'cluster', 'cluster-new-connection', 'reject', 'exit', 'sigterm', 'timers', 'memory', 'start', 'idle', 'rebalance', 'overload'];
const wanted = name => !only || only.includes(name);

const config = quick
	? {duration: 1, warmup: 1, rejectRounds: 2, timeRounds: 3, idleConnections: 2000, rejectMs: 1000}
	: {duration: 2, warmup: 2, rejectRounds: 4, timeRounds: 7, idleConnections: 10_000, rejectMs: 2000};
const CONNECTIONS = 20;

const report = createReport();
const {row} = report;
const ratio = (a, b) => a / b;

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

// --- 1-3. CPU per request: hot-path.js (one process per protocol; the whole cluster) ---

// --- 4. 503s of a draining worker vs 200s of the same worker ---------------------
async function figureReject() {
	for (const level of ['info', 'debug']) {
		log(`503 rejection rate of a draining worker, log level ${level}`);
		const vsKeepAlive = [];
		const vsClose = [];
		const abs = {ka: [], close: [], rejected: []};
		// CPU per answered request (primary + worker): a resolvable figure beside the rates.
		const cpu = {close: [], rejected: [], ratio: []};
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
				const pids = groupPids(proc);
				const close = await load(url, {duration: config.duration, connections: CONNECTIONS, headers: {connection: 'close'}, pids});
				proc.signal('SIGTERM');
				await proc.msg('rejecting new requests');
				const rejected = await load(url, {duration: config.duration, connections: CONNECTIONS, pids});
				errors += rejected.errors;
				cpu.close.push(close.cpuUsPer(200));
				cpu.rejected.push(rejected.cpuUsPer(503));
				cpu.ratio.push(rejected.cpuUsPer(503) / close.cpuUsPer(200));
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
		row(`server CPU per 503 of a draining worker (primary + worker), log level \`${level}\``, 'per 200 of the same worker, client sending `Connection: close`', `${fmt(summary(cpu.ratio), {unit: 'x'})}; ${summary(cpu.rejected).median.toFixed(0)} vs ${summary(cpu.close).median.toFixed(0)} us`, 'context: what a 503 costs', 'reported');
		if (errors > 0) {
			report.note(`503 runs at ${level}: autocannon counted ${errors} socket errors in total`);
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
/** A worker's /mem answers (hello.mjs: heapUsed after gc, rss), one per worker pid. */
async function workerMemory(port, workers = 2) {
	const seen = new Map();
	for (let i = 0; i < 12 && seen.size < workers; i++) {
		const m = JSON.parse((await get(port, '/mem')).body);
		seen.set(m.pid, m);
	}

	return [...seen.values()];
}

async function figureMemory() {
	log('memory: primary RSS with and without --metrics; a worker\'s RSS and heap beside a hand-written cluster\'s');
	const mb = values => fmt(summary(values), {decimals: 1, unit: ' MB'});
	const primary = {idle: [], plain: [], metrics: [], cluster: []};
	const worker = {rss: [], heap: [], clusterRss: [], clusterHeap: []};
	const single = {rss: [], heap: [], bareRss: [], bareHeap: []};
	for (let round = 0; round < 3; round++) {
		const procs = [];
		try {
			procs.push(start(['-e', 'setInterval(() => {}, 1000)'], {stdout: 'ignore'}));
			const port = await freePort();
			procs.push(await startCli(port, {nodeArgs: ['--expose-gc']}));
			const metricsPort = await freePort();
			const portM = await freePort();
			const withMetrics = await startCli(portM, {flags: ['--metrics', `127.0.0.1:${metricsPort}`], nodeArgs: ['--expose-gc']});
			procs.push(withMetrics);
			const portC = await freePort();
			const cluster = start([CLUSTER], {env: {PORT: String(portC), BENCH_WRAP: 'none', WORKERS: '2'}, nodeArgs: ['--expose-gc']});
			procs.push(cluster);
			await cluster.msg('worker listening', {count: 2});
			const portS = await freePort();
			procs.push(await startSingle(portS, 'attach', ['--expose-gc']));
			const portB = await freePort();
			procs.push(await startSingle(portB, 'none', ['--expose-gc']));
			// The primary's --metrics RSS once it has served scrapes (prom-client grows with the first ones).
			for (let i = 0; i < 5; i++) {
				await get(metricsPort, '/metrics');
			}

			await sleep(500);
			const [idle, cli] = procs;
			primary.idle.push(vmRssMb(idle.pid));
			primary.plain.push(vmRssMb(cli.pid));
			primary.metrics.push(vmRssMb(withMetrics.pid));
			primary.cluster.push(vmRssMb(cluster.pid));
			for (const m of await workerMemory(port)) {
				worker.rss.push(m.rss / 1024 / 1024);
				worker.heap.push(m.heapUsed / 1024 / 1024);
			}

			for (const m of await workerMemory(portC)) {
				worker.clusterRss.push(m.rss / 1024 / 1024);
				worker.clusterHeap.push(m.heapUsed / 1024 / 1024);
			}

			for (const [p, rss, heap] of [[portS, single.rss, single.heap], [portB, single.bareRss, single.bareHeap]]) {
				const [m] = await workerMemory(p, 1);
				rss.push(m.rss / 1024 / 1024);
				heap.push(m.heapUsed / 1024 / 1024);
			}

		} finally {
			for (const proc of procs) {
				proc.stop();
			}
		}
	}

	const med = values => summary(values).median;
	row('primary process RSS (VmRSS), idle, `-w 2`', 'a bare `node -e` process; a hand-written `node:cluster` primary', `${mb(primary.plain)} vs ${mb(primary.idle)}; hand-written primary ${mb(primary.cluster)}`, '<= 60 MB', verdict(med(primary.plain) <= 60));
	row('primary process RSS (VmRSS), `-w 2 --metrics`, after 5 scrapes', 'the same without --metrics', `${mb(primary.metrics)} vs ${mb(primary.plain)}`, '<= 70 MB', verdict(med(primary.metrics) <= 70));
	row('worker RSS and heap (heapUsed after gc), `-w 2`, app with `attach()`', 'a hand-written `node:cluster` worker running the same app without the helper',
		`RSS +${(med(worker.rss) - med(worker.clusterRss)).toFixed(1)} MB (${mb(worker.rss)} vs ${mb(worker.clusterRss)}); heap +${(med(worker.heap) - med(worker.clusterHeap)).toFixed(2)} MB (${mb(worker.heap)} vs ${mb(worker.clusterHeap)})`, 'report', 'reported');
	row('one process under plain node, `attach()`: RSS and heap', 'the same server without the helper',
		`RSS +${(med(single.rss) - med(single.bareRss)).toFixed(1)} MB (${mb(single.rss)} vs ${mb(single.bareRss)}); heap +${(med(single.heap) - med(single.bareHeap)).toFixed(2)} MB`, 'report', 'reported');
}

// --- 9. start time (lib/startup.js, as bench/startup.js) ---------------------------
async function figureStart() {
	const rounds = config.timeRounds * 2;
	const builds = [{label: '', cli: paths.cli, worker: paths.worker}];
	// Every node process reads NODE_EXTRA_CA_CERTS at start (tens of ms with a
	// distribution's whole bundle), which would dilute the ratios; a container's
	// entrypoint seldom has it. Measured without it, and with it when set here.
	const {NODE_EXTRA_CA_CERTS: extraCa, ...clean} = process.env;
	const envs = extraCa ? {'': clean, [`, NODE_EXTRA_CA_CERTS=${extraCa}`]: process.env} : {'': clean};
	for (const [suffix, env] of Object.entries(envs)) {
		log(`start: CLI launch -> both workers listening vs a hand-written node:cluster primary; --version/--help vs node -e 0${suffix}`);
		const startTimes = await measureStart(startCases(builds), {rounds, warmup: 2, env});
		const flagTimes = await measureStart(flagCases(builds), {rounds, warmup: 2, env});
		const ms = values => fmt(summary(values), {decimals: 0, unit: ' ms'});
		const r = (a, b) => summary(a.map((value, i) => value / b[i]));
		const plain = startTimes['graceful-cluster -w 2 app'];
		const hand = startTimes['node:cluster primary, 2 workers'];
		const plainRatio = r(plain, hand);
		row(`start: spawn -> both workers listening, \`graceful-cluster -w 2\`, app without \`attach()\`${suffix}`, 'a hand-written `node:cluster` primary running the same app; plain `node app`',
			`${fmt(plainRatio, {unit: 'x'})}; ${ms(plain)} vs ${ms(hand)}; plain node app ${ms(startTimes['node app'])}`, '<= 1.2x', verdict(plainRatio.median <= 1.2));
		// The same app with attach() under both: the helper's own import is the app's in either.
		const gc = startTimes['graceful-cluster -w 2 app (attach)'];
		const handAttach = startTimes['node:cluster primary, 2 workers (attach)'];
		const attachRatio = r(gc, handAttach);
		row(`start: spawn -> both workers listening, \`graceful-cluster -w 2\`, app with \`attach()\`${suffix}`, 'a hand-written `node:cluster` primary running the same app, `attach()` and all',
			`${fmt(attachRatio, {unit: 'x'})}; ${ms(gc)} vs ${ms(handAttach)}; against the hand-written primary running the app without the helper ${fmt(r(gc, hand), {unit: 'x'})}`, '<= 1.2x', verdict(attachRatio.median <= 1.2));
		for (const flag of ['--version', '--help']) {
			const values = flagTimes[`graceful-cluster ${flag}`];
			const flagRatio = r(values, flagTimes['node -e 0']);
			row(`\`graceful-cluster ${flag}\`: spawn -> exit${suffix}`, '`node -e 0`', `${fmt(flagRatio, {unit: 'x'})}; ${ms(values)} vs ${ms(flagTimes['node -e 0'])}`, '<= 1.5x', verdict(flagRatio.median <= 1.5));
		}
	}
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
		report.note(`ulimit -n is ${limit}: the idle-connection figure ran with ${scaled} connections instead of ${count}. Raise it (\`ulimit -n ${needed}\`) and rerun for the full figure.`);
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
/** The commit measured, `+changes` when the tree differs from it. */
function commit() {
	try {
		const hash = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {cwd: ROOT, encoding: 'utf8'}).trim();
		const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], {cwd: ROOT, encoding: 'utf8'}).trim() !== '';
		return dirty ? `${hash}+changes` : hash;
	} catch {
		return 'unknown';
	}
}

const hotPath = hotPathConfig(quick);
const runners = {filter: figureFilter, protocols: () => figureProtocols(report, hotPath), instructions: () => figureInstructions(report, {rounds: quick ? 1 : 3}), cluster: () => figureCluster(report, hotPath), 'cluster-new-connection': () => figureCluster(report, {...hotPath, newConnection: true}), reject: figureReject, exit: figureExit, sigterm: figureSigterm, timers: figureTimers, memory: figureMemory, start: figureStart, idle: figureIdle, rebalance: () => figureRebalance(report), overload: () => figureOverload(report)};

async function main() {
	// Read now: the tree may change while the run goes on.
	const measured = commit();
	useDist(snapshotDist());
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
			report.rows.push({figure: name, baseline: '-', measured: `failed: ${String(error.message ?? error).replaceAll('|', '/')}`, goal: '-', verdict: 'failed'});
		} finally {
			killAll();
		}
	}

	const minutes = ((performance.now() - began) / 60_000).toFixed(1);
	const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
	const lines = [
		`graceful-cluster benchmark, ${new Date().toISOString().slice(0, 10)}, commit ${measured}: \`npm run bench${quick ? ' -- --quick' : ''}\`, ${os.availableParallelism()} cores (${cpu}), Node ${process.version}, ${os.platform()} ${os.release()}; ${minutes} min.`,
		`${quick ? 'Quick run: ' : ''}CPU per request: ${hotPath.rounds} rounds, fresh servers (or clusters) each round, started in an order that rotates from round to round, taking 8 turns each to warm up on as many requests as they are then measured on in 8 more turns${hotPath.twin ? ', each target beside a twin (the same build, a second process) that says what the run resolves' : ''}; the 503 figure: ${config.rejectRounds} rounds (a fresh worker each) per log level of ${config.duration} s loads (autocannon, ${CONNECTIONS} connections); ${config.timeRounds} rounds per timing figure, ${config.timeRounds * 2} per start figure; median (min-max) of the per-round values, A and B alternating in each round.`,
		'The clients run in the harness process, on the same 2 cores as the servers: absolute req/s are lower than with a separate client; the ratios compare like with like.',
		'',
		report.markdown(),
	];
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
