// Capacity: connection age and overload (the capacity issue, item 3). Each figure
// runs the same scenario without and with its option, side by side in one run.
//
//   rebalance: pod A (`graceful-cluster --workers 1 [--max-connection-age 5s]`)
//              behind a connection-level balancer (HAProxy `mode tcp`, `balance
//              random`; a Node `net` stand-in that picks a backend at random per
//              connection when haproxy is not on PATH); 8 keep-alive clients (one
//              connection each) at 200 req/s in all; 3 s in, pod B starts and the
//              balancer adds it (HAProxy: by its health check). For 30 s, pod B's
//              share of the requests, second by second; summary: its share in
//              the last 10 s and the time until it first reaches 40 %. Without
//              the option the clients never reconnect: B's share stays ~0.
//   overload:  one worker (`--workers 1 [--max-event-loop-delay 100ms]`), 10 ms of
//              CPU per request (bench/servers/cpu.mjs). Its capacity first
//              (closed loop, 4 clients, 5 s), then an open-loop load at 2x and 4x
//              that rate for 10 s each (fixed arrivals, a keep-alive pool as large
//              as it needs, 10 s client timeout), on a fresh pod each run: served
//              throughput (200s per second during the load), the served p99 (from
//              each request's scheduled send), the share answered 503 and the
//              share timed out or failed.
//
//   npm run bench -- --only=rebalance,overload      # from the repo root (installs, builds)
//   node bench/capacity.js [--only=rebalance,overload] [--age=5s] [--delay=100ms]   # after `npm run build`
//
// About 3 minutes on 2 cores. The clients run in this process, on the same cores
// as the pods: absolute rates are lower than with a separate client; the with/without
// columns compare like with like.
import http from 'node:http';
import net from 'node:net';
import {spawnSync} from 'node:child_process';
import {mkdtempSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import process from 'node:process';
import {freePort, killAll, killAllOnSignal, paths, sleep, snapshotDist, start, useDist} from './lib/proc.js';
import {createReport, log} from './lib/report.js';
import {percentile} from './lib/stats.js';

export const CPU_SERVER = new URL('servers/cpu.mjs', import.meta.url).pathname;

const REBALANCE = {clients: 8, rate: 200, beforeS: 3, afterS: 30, lastS: 10, target: 0.4};
const OVERLOAD = {cpuMs: 10, capacityClients: 4, capacityS: 5, warmupS: 1, loadS: 10, timeoutMs: 10_000, multipliers: [2, 4]};

const pct = value => Number.isFinite(value) ? `${(value * 100).toFixed(1)} %` : 'n/a';

/** "500ms", "5s", "2m" in ms. */
function duration(text) {
	const match = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(text);
	if (!match) {
		throw new Error(`"${text}" is not a duration (500ms, 5s, 2m)`);
	}

	return Number(match[1]) * {ms: 1, s: 1000, m: 60_000}[match[2]];
}

/** `graceful-cluster --workers 1 ...flags bench/servers/cpu.mjs` on `port`, once its worker listens. */
async function startPod(port, {pod, flags = [], cpuMs = 0}) {
	const proc = start([paths.cli, '--workers', '1', ...flags, CPU_SERVER], {env: {PORT: String(port), POD: pod, CPU_MS: String(cpuMs)}});
	await proc.msg('worker listening');
	return proc;
}

// --- the balancer ---------------------------------------------------------------------

function haproxyOnPath() {
	const result = spawnSync('haproxy', ['-v'], {encoding: 'utf8'});
	return !result.error && result.status === 0;
}

/**
 * HAProxy in `mode tcp`, `balance random`, both pods configured with a TCP
 * health check; pod B's port has nothing behind it at first, so HAProxy marks
 * it DOWN (awaited here) and UP again once pod B listens.
 */
async function startHaproxy(lbPort, pods) {
	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-bench-haproxy-'));
	const file = path.join(dir, 'haproxy.cfg');
	writeFileSync(file, [
		'global',
		'    log stdout format raw local0 info',
		'    maxconn 4000',
		'defaults',
		'    mode tcp',
		'    log global',
		'    timeout connect 2s',
		'    timeout client 120s',
		'    timeout server 120s',
		'    timeout check 1s',
		'frontend fe',
		`    bind 127.0.0.1:${lbPort}`,
		'    default_backend be',
		'backend be',
		'    balance random',
		...pods.map(pod => `    server ${pod.name} 127.0.0.1:${pod.port} check inter 300 fall 2 rise 1`),
		'',
	].join('\n'));
	const proc = start(['-db', '-f', file], {command: 'haproxy', stderr: 'pipe', parse: line => line});
	const state = (name, up) => line => line.text.includes(`Server be/${name} is ${up ? 'UP' : 'DOWN'}`);
	const down = pods.filter(pod => !pod.up);
	await Promise.all(down.map(async pod => proc.waitFor(state(pod.name, false), {timeoutMs: 10_000})));
	return {
		name: `HAProxy ${/version (\S+)/i.exec(spawnSync('haproxy', ['-v'], {encoding: 'utf8'}).stdout)?.[1] ?? ''} (\`mode tcp\`, \`balance random\`, TCP health checks every 300 ms)`,
		/** Resolves with performance.now() when HAProxy marks `name` UP. */
		async added(name) {
			const line = await proc.waitFor(state(name, true), {timeoutMs: 10_000});
			return line.at ?? performance.now();
		},
		stop() {
			proc.stop();
			rmSync(dir, {recursive: true, force: true});
		},
	};
}

/** The stand-in: a `net` proxy that pipes each new connection to a backend drawn at random. */
async function startNodeBalancer(lbPort, pods) {
	const backends = pods.filter(pod => pod.up).map(pod => pod.port);
	const sockets = new Set();
	const server = net.createServer(client => {
		const upstream = net.connect(backends[Math.floor(Math.random() * backends.length)], '127.0.0.1');
		for (const socket of [client, upstream]) {
			sockets.add(socket);
			socket.on('close', () => sockets.delete(socket));
			socket.on('error', () => {
				client.destroy();
				upstream.destroy();
			});
		}

		client.pipe(upstream);
		upstream.pipe(client);
	});
	await new Promise(resolve => server.listen(lbPort, '127.0.0.1', resolve));
	return {
		name: 'a Node `net` stand-in (a random backend per connection; haproxy was not on PATH)',
		async added(name) {
			backends.push(pods.find(pod => pod.name === name).port);
			return performance.now();
		},
		stop() {
			server.close();
			for (const socket of sockets) {
				socket.destroy();
			}
		},
	};
}

// --- (a) rebalance ---------------------------------------------------------------------

/**
 * `clients` keep-alive clients, one connection each (an Agent with one socket),
 * sending `rate` requests per second in all, round robin, until `stop()`.
 */
function keepAliveClients(port, {clients, rate}) {
	const agents = Array.from({length: clients}, () => new http.Agent({keepAlive: true, maxSockets: 1}));
	const records = [];
	const startedAt = performance.now();
	let sent = 0;
	const send = agent => {
		const request = http.get({host: '127.0.0.1', port, path: '/', agent}, response => {
			const pod = response.headers['x-pod'];
			const closed = response.headers.connection === 'close';
			response.resume();
			response.on('end', () => records.push({at: performance.now(), pod, closed}));
		});
		request.setTimeout(10_000, () => request.destroy(new Error('timed out')));
		request.on('error', () => records.push({at: performance.now(), pod: undefined, closed: true}));
	};

	const timer = setInterval(() => {
		const due = Math.floor(((performance.now() - startedAt) / 1000) * rate);
		for (; sent < due; sent++) {
			send(agents[sent % clients]);
		}
	}, 2);
	return {
		records,
		stop() {
			clearInterval(timer);
			for (const agent of agents) {
				agent.destroy();
			}
		},
	};
}

async function rebalanceRun({flags, useHaproxy}) {
	const [lbPort, portA, portB] = [await freePort(), await freePort(), await freePort()];
	const procs = [];
	let balancer;
	let clients;
	try {
		procs.push(await startPod(portA, {pod: 'A', flags}));
		const pods = [{name: 'a', port: portA, up: true}, {name: 'b', port: portB, up: false}];
		balancer = useHaproxy ? await startHaproxy(lbPort, pods) : await startNodeBalancer(lbPort, pods);
		clients = keepAliveClients(lbPort, REBALANCE);
		await sleep(REBALANCE.beforeS * 1000);
		const bStartedAt = performance.now();
		procs.push(await startPod(portB, {pod: 'B', flags}));
		const upAt = await balancer.added('b');
		await sleep((REBALANCE.afterS * 1000) - (performance.now() - bStartedAt));
		clients.stop();
		await sleep(200);
		const seconds = Array.from({length: REBALANCE.afterS}, () => ({a: 0, b: 0, failed: 0}));
		let closes = 0;
		for (const record of clients.records) {
			closes += record.closed ? 1 : 0;
			const second = Math.floor((record.at - bStartedAt) / 1000);
			if (second >= 0 && second < REBALANCE.afterS) {
				seconds[second][record.pod === 'A' ? 'a' : (record.pod === 'B' ? 'b' : 'failed')]++;
			}
		}

		const share = list => {
			const served = list.reduce((sum, s) => sum + s.a + s.b, 0);
			return list.reduce((sum, s) => sum + s.b, 0) / served;
		};

		const reached = seconds.findIndex(s => s.b / (s.a + s.b) >= REBALANCE.target);
		return {
			balancer: balancer.name,
			seconds,
			upAfterMs: upAt - bStartedAt,
			last: share(seconds.slice(-REBALANCE.lastS)),
			reachedS: reached === -1 ? undefined : reached + 1,
			failed: seconds.reduce((sum, s) => sum + s.failed, 0),
			closes,
			total: clients.records.length,
		};
	} finally {
		clients?.stop();
		balancer?.stop();
		for (const proc of procs) {
			proc.stop();
		}
	}
}

export async function figureRebalance(report, {ageMs = 5000} = {}) {
	const useHaproxy = haproxyOnPath();
	const age = `${ageMs / 1000}s`;
	const variants = {without: [], with: ['--max-connection-age', age]};
	const results = {};
	for (const [name, flags] of Object.entries(variants)) {
		log(`rebalance: pod B joins pod A behind ${useHaproxy ? 'HAProxy mode tcp' : 'the Node stand-in'}, ${REBALANCE.clients} keep-alive clients at ${REBALANCE.rate} req/s, ${name} --max-connection-age ${age}`);
		results[name] = await rebalanceRun({flags, useHaproxy});
		const r = results[name];
		log(`  B up at the balancer ${r.upAfterMs.toFixed(0)} ms after its start; B's share in the last ${REBALANCE.lastS} s ${pct(r.last)}; first >= ${REBALANCE.target * 100} % after ${r.reachedS ?? 'never'} s; ${r.failed} failed of ${r.total}; ${r.closes} responses with Connection: close`);
	}

	const {without, with: withAge} = results;
	const lines = [
		`Pod B's share of the requests, per second after its start (${without.balancer}; ${REBALANCE.clients} keep-alive clients, ${REBALANCE.rate} req/s in all):`,
		'',
		`| second | without: requests | without: B's share | with \`--max-connection-age ${age}\`: requests | with: B's share |`,
		'| ---: | ---: | ---: | ---: | ---: |',
		...without.seconds.map((s, i) => {
			const w = withAge.seconds[i];
			return `| ${i + 1} | ${s.a + s.b} | ${pct(s.b / (s.a + s.b))} | ${w.a + w.b} | ${pct(w.b / (w.a + w.b))} |`;
		}),
	];
	report.table(lines.join('\n'));
	log(lines.join('\n'));
	const describe = r => `B's share in the last ${REBALANCE.lastS} s ${pct(r.last)}; first >= ${REBALANCE.target * 100} % after ${r.reachedS === undefined ? 'never' : `${r.reachedS} s`}; ${r.failed} failed; ${r.closes} \`Connection: close\``;
	report.row(`a pod joins a running one behind ${without.balancer}, ${REBALANCE.clients} keep-alive clients, ${REBALANCE.rate} req/s; the new pod's share over ${REBALANCE.afterS} s, \`--max-connection-age ${age}\``,
		'the same without the option',
		`with: ${describe(withAge)}; without: ${describe(without)}`,
		'with: B near 50 %, no failed request; without: B ~0 (the clients never reconnect)',
		withAge.closes === 0 ? 'no effect: no `Connection: close` seen (the option is not in this build?)' : (withAge.last >= 0.3 && withAge.failed === 0 ? 'met' : 'NOT met'));
	if (withAge.closes === 0) {
		report.note(`rebalance: with \`--max-connection-age ${age}\` no response carried \`Connection: close\`: the option does nothing in the build measured.`);
	}

	return results;
}

// --- (b) overload ----------------------------------------------------------------------

/** Closed loop: `clients` sequential keep-alive clients for `seconds`; 200s per second. */
async function closedLoop(port, {clients, seconds}) {
	const agent = new http.Agent({keepAlive: true, maxSockets: clients});
	const end = performance.now() + (seconds * 1000);
	let ok = 0;
	const one = () => new Promise(resolve => {
		const request = http.get({host: '127.0.0.1', port, path: '/', agent}, response => {
			response.resume();
			response.on('end', () => resolve(response.statusCode));
		});
		request.on('error', () => resolve(0));
	});
	await Promise.all(Array.from({length: clients}, async () => {
		while (performance.now() < end) {
			if (await one() === 200) {
				ok++;
			}
		}
	}));
	agent.destroy();
	return ok / seconds;
}

/**
 * Open loop: `rate` requests per second for `seconds`, each sent at its
 * scheduled time whatever the earlier ones are doing, on a keep-alive pool with
 * no limit; a request not answered within `timeoutMs` of its send is aborted.
 * Latency counts from the scheduled send.
 */
async function openLoop(port, {rate, seconds, timeoutMs}) {
	const agent = new http.Agent({keepAlive: true, maxSockets: Number.POSITIVE_INFINITY});
	const total = Math.round(rate * seconds);
	const outcomes = {ok: 0, shed: 0, retryAfter: 0, timedOut: 0, failed: 0, other: 0, okInWindow: 0};
	const latencies = [];
	const pending = new Set();
	const startedAt = performance.now();
	const windowEnd = startedAt + (seconds * 1000);
	const send = scheduled => {
		const done = new Promise(resolve => {
			let settled = false;
			const settle = kind => {
				if (!settled) {
					settled = true;
					outcomes[kind]++;
					resolve();
				}
			};

			const request = http.get({host: '127.0.0.1', port, path: '/', agent}, response => {
				response.resume();
				response.on('end', () => {
					if (settled) {
						return;
					}

					const now = performance.now();
					if (response.statusCode === 200) {
						latencies.push(now - scheduled);
						outcomes.okInWindow += now <= windowEnd ? 1 : 0;
						settle('ok');
					} else if (response.statusCode === 503) {
						outcomes.retryAfter += response.headers['retry-after'] === undefined ? 0 : 1;
						settle('shed');
					} else {
						settle('other');
					}
				});
				response.on('error', () => settle('failed'));
			});
			const timer = setTimeout(() => {
				settle('timedOut');
				request.destroy();
			}, timeoutMs - (performance.now() - scheduled));
			request.on('error', () => settle('failed'));
			request.on('close', () => clearTimeout(timer));
		});
		pending.add(done);
		void done.then(() => pending.delete(done));
	};

	let sent = 0;
	await new Promise(resolve => {
		const timer = setInterval(() => {
			const due = Math.min(total, Math.floor(((performance.now() - startedAt) / 1000) * rate));
			for (; sent < due; sent++) {
				send(startedAt + ((sent * 1000) / rate));
			}

			if (sent >= total) {
				clearInterval(timer);
				resolve();
			}
		}, 1);
	});
	await Promise.all(pending);
	agent.destroy();
	latencies.sort((a, b) => a - b);
	return {
		sent: total,
		servedPerS: outcomes.okInWindow / seconds,
		p99: percentile(latencies, 99),
		p50: percentile(latencies, 50),
		okShare: outcomes.ok / total,
		shedShare: outcomes.shed / total,
		retryAfterShare: outcomes.shed === 0 ? Number.NaN : outcomes.retryAfter / outcomes.shed,
		failedShare: (outcomes.timedOut + outcomes.failed + outcomes.other) / total,
		timedOutShare: outcomes.timedOut / total,
	};
}

export async function figureOverload(report, {delayMs = 100} = {}) {
	const delay = `${delayMs}ms`;
	const variants = {without: [], with: ['--max-event-loop-delay', delay]};
	const {cpuMs, timeoutMs} = OVERLOAD;
	log(`overload: one worker, ${cpuMs} ms of CPU per request; capacity (closed loop, ${OVERLOAD.capacityClients} clients, ${OVERLOAD.capacityS} s)`);
	const capacity = {};
	for (const [name, flags] of Object.entries(variants)) {
		const port = await freePort();
		const proc = await startPod(port, {pod: 'A', flags, cpuMs});
		try {
			await closedLoop(port, {clients: OVERLOAD.capacityClients, seconds: OVERLOAD.warmupS});
			capacity[name] = await closedLoop(port, {clients: OVERLOAD.capacityClients, seconds: OVERLOAD.capacityS});
		} finally {
			proc.stop();
		}

		log(`  ${name}: ${capacity[name].toFixed(1)} req/s`);
	}

	// Both variants get the same arrival rates: those of the capacity without the option.
	const base = capacity.without;
	const results = {};
	for (const multiplier of OVERLOAD.multipliers) {
		const rate = base * multiplier;
		for (const [name, flags] of Object.entries(variants)) {
			const port = await freePort();
			const proc = await startPod(port, {pod: 'A', flags, cpuMs});
			try {
				const r = await openLoop(port, {rate, seconds: OVERLOAD.loadS, timeoutMs});
				results[`${multiplier}x ${name}`] = r;
				log(`  ${multiplier}x (${rate.toFixed(0)} req/s), ${name} --max-event-loop-delay ${delay}: served ${r.servedPerS.toFixed(1)}/s (${pct(r.servedPerS / base)} of capacity), served p99 ${r.p99.toFixed(0)} ms (p50 ${r.p50.toFixed(0)} ms); 200 ${pct(r.okShare)}, 503 ${pct(r.shedShare)}, timed out or failed ${pct(r.failedShare)}`);
			} finally {
				proc.stop();
			}
		}
	}

	const lines = [
		`One worker, ${cpuMs} ms of CPU per request, capacity ${base.toFixed(1)} req/s (with the option: ${capacity.with.toFixed(1)}); open-loop load for ${OVERLOAD.loadS} s, ${timeoutMs / 1000} s client timeout:`,
		'',
		`| load | \`--max-event-loop-delay\` | served/s (of capacity) | served p99 | answered 503 | timed out or failed |`,
		'| --- | --- | ---: | ---: | ---: | ---: |',
		...Object.entries(results).map(([key, r]) => {
			const [multiplier, name] = key.split(' ');
			return `| ${multiplier} (${(base * Number.parseFloat(multiplier)).toFixed(0)} req/s) | ${name === 'with' ? delay : 'off'} | ${r.servedPerS.toFixed(1)} (${pct(r.servedPerS / base)}) | ${r.p99.toFixed(0)} ms | ${pct(r.shedShare)} | ${pct(r.failedShare)} |`;
		}),
	];
	report.table(lines.join('\n'));
	log(lines.join('\n'));
	let shedSeen = false;
	for (const multiplier of OVERLOAD.multipliers) {
		const w = results[`${multiplier}x with`];
		const o = results[`${multiplier}x without`];
		shedSeen ||= w.shedShare > 0;
		const describe = r => `served ${r.servedPerS.toFixed(1)}/s (${pct(r.servedPerS / base)} of capacity), p99 ${r.p99.toFixed(0)} ms, 503 ${pct(r.shedShare)}, timed out or failed ${pct(r.failedShare)}`;
		report.row(`one worker at ${multiplier}x its capacity (${(base * multiplier).toFixed(0)} req/s of ${cpuMs} ms CPU each, ${OVERLOAD.loadS} s open loop), \`--max-event-loop-delay ${delay}\``,
			'the same without the option',
			`served/s ${(w.servedPerS / o.servedPerS).toFixed(2)}x, served p99 ${(w.p99 / o.p99).toFixed(2)}x; with: ${describe(w)}${Number.isFinite(w.retryAfterShare) ? ` (${pct(w.retryAfterShare)} of the 503s with Retry-After)` : ''}; without: ${describe(o)}`,
			'with: most of the throughput kept, p99 well under the timeout, no timeouts',
			w.shedShare === 0 ? 'no effect: no 503 seen (the option is not in this build?)' : (w.servedPerS >= 0.8 * base && w.failedShare < 0.01 ? 'met' : 'NOT met'));
	}

	if (!shedSeen) {
		report.note(`overload: with \`--max-event-loop-delay ${delay}\` no request was answered 503: the option does nothing in the build measured.`);
	}

	return {capacity, results};
}

// Run alone: `node bench/capacity.js [--only=rebalance,overload] [--age=5s] [--delay=100ms]`.
if (import.meta.url === `file://${process.argv[1]}`) {
	const argv = process.argv.slice(2);
	const value = name => argv.find(arg => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
	const only = value('only')?.split(',');
	const report = createReport();
	killAllOnSignal();
	useDist(snapshotDist('capacity'));
	const began = performance.now();
	try {
		if (!only || only.includes('rebalance')) {
			await figureRebalance(report, {ageMs: duration(value('age') ?? '5s')});
		}

		if (!only || only.includes('overload')) {
			await figureOverload(report, {delayMs: duration(value('delay') ?? '100ms')});
		}
	} finally {
		killAll();
	}

	process.stdout.write(`capacity benchmark, ${new Date().toISOString().slice(0, 10)}, ${os.availableParallelism()} cores, Node ${process.version}; ${((performance.now() - began) / 60_000).toFixed(1)} min.\n\n${report.markdown()}\n`);
}
