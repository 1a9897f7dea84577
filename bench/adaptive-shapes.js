#!/usr/bin/env node
// `--adaptive-reject on` against the traffic shapes that broke its first rule
// (issue 41): each termination starts a cluster, sends the shape's traffic
// from its own source addresses (127.0.x.y: the pod tells peers apart by
// address, as behind a load balancer's nodes), signals it, and each peer keeps
// sending until its own stop time, drawn per termination. A request refused or
// reset is one the load balancer sent after the pod stopped listening: it must
// never happen. Per shape it prints the terminations, the requests refused, the
// reject phase's length against the fixed period, and how long after the last
// peer's stop it ended; then a markdown table for docs/benchmarks.md.
//
//   npm run build
//   node bench/adaptive-shapes.js [--terminations 50] [--parallel 5] [--only bursty,taper] [--seed 1]
//
// Shapes (the issue's own parameters where it gives them):
//   abrupt     3 peers, 30 req/s each on keep-alive connections, stop 0.5-4 s after the signal
//   bursty     a batch client: 30 requests every 6 s, stops 3-12 s; plus a steady peer that stops at 1 s
//   taper      one address for everything (a sidecar, SNAT): 200 req/s, then 20 from 2 s, 2 from 5 s, stop 10-14 s
//   straggler  3 peers at 30 req/s stop at 0.5-1.5 s; one at 5 req/s stops at 6-9 s
//   new-peer   2 peers stop at 1 s; a peer first seen 1 s after the signal, 10 req/s, stops at 4-6 s
//   young      a cluster 3 s old: a peer at 1 req/s and one at 20 req/s, stop 1-6 s
// Exits 1 when any request was refused or reset.
import {spawn} from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import process from 'node:process';
import readline from 'node:readline';
import {setTimeout as sleep} from 'node:timers/promises';
import {fileURLToPath} from 'node:url';
import {parseArgs} from 'node:util';

const root = path.resolve(fileURLToPath(import.meta.url), '../..');
const cli = path.join(root, 'dist/bundle/cli.cjs');
const app = path.join(root, 'test/fixtures/app.mjs');
const {values} = parseArgs({options: {verbose: {type: 'boolean', default: false}, terminations: {type: 'string', default: '50'}, parallel: {type: 'string', default: '5'}, only: {type: 'string'}, seed: {type: 'string', default: '1'}}});
const REJECT_PERIOD_MS = 20_000;

function seeded(seed) {
	let state = (Math.imul(seed ^ 0x9E_37_79_B9, 0x85_EB_CA_6B) >>> 0) || 1;
	return () => {
		state ^= state << 13;
		state >>>= 0;
		state ^= state >>> 17;
		state ^= state << 5;
		state >>>= 0;
		return state / 2 ** 32;
	};
}

const between = (random, from, to) => from + (random() * (to - from));

/** Poisson send times at `rate` per second over [from, to) ms. */
function poisson(random, rate, from, to) {
	const times = [];
	for (let at = from - (Math.log(random()) / rate * 1000); at < to; at -= Math.log(random()) / rate * 1000) {
		times.push(at);
	}

	return times;
}

/** `size` requests at once every `everyMs` over [from, to), the first burst at a random phase. */
function bursts(random, everyMs, size, from, to) {
	const times = [];
	for (let at = from + (random() * everyMs); at < to; at += everyMs) {
		for (let index = 0; index < size; index++) {
			times.push(at + index);
		}
	}

	return times;
}

// Each shape: its warm-up before the signal (ms), and its peers' send times
// relative to the signal (negative: before), with the peer's stop time.
const SHAPES = {
	abrupt: {warmupMs: 8000, peers: random => [1, 2, 3].map(() => {
		const stop = between(random, 500, 4000);
		return {keepAlive: true, stop, times: poisson(random, 30, -8000, stop)};
	})},
	bursty: {warmupMs: 14_000, peers(random) {
		const stop = between(random, 3000, 12_000);
		return [{keepAlive: false, stop, times: bursts(random, 6000, 30, -14_000, stop)}, {keepAlive: true, stop: 1000, times: poisson(random, 20, -14_000, 1000)}];
	}},
	taper: {warmupMs: 8000, peers(random) {
		const stop = between(random, 10_000, 14_000);
		return [{keepAlive: true, stop, sockets: 32, times: [...poisson(random, 200, -8000, 2000), ...poisson(random, 20, 2000, 5000), ...poisson(random, 2, 5000, stop)]}];
	}},
	straggler: {warmupMs: 8000, peers(random) {
		const early = [1, 2, 3].map(() => {
			const stop = between(random, 500, 1500);
			return {keepAlive: true, stop, times: poisson(random, 30, -8000, stop)};
		});
		const stop = between(random, 6000, 9000);
		return [...early, {keepAlive: false, stop, times: poisson(random, 5, -8000, stop)}];
	}},
	'new-peer': {warmupMs: 8000, peers(random) {
		const stop = between(random, 4000, 6000);
		return [{keepAlive: true, stop: 1000, times: poisson(random, 30, -8000, 1000)}, {keepAlive: true, stop: 1000, times: poisson(random, 30, -8000, 1000)}, {keepAlive: false, stop, times: poisson(random, 10, 1000, stop)}];
	}},
	young: {warmupMs: 3000, peers(random) {
		return [{keepAlive: false, stop: between(random, 3000, 6000), times: []}, {keepAlive: true, stop: between(random, 1000, 3000), times: []}].map((peer, index) => ({...peer, times: poisson(random, index === 0 ? 1 : 20, -3000, peer.stop)}));
	}},
};

async function freePort() {
	const server = net.createServer().listen(0, '127.0.0.1');
	await new Promise(resolve => {
		server.once('listening', resolve);
	});
	const {port} = server.address();
	await new Promise(resolve => {
		server.close(resolve);
	});
	return port;
}

/** One termination: returns what happened to every request, and the drain's own figures. */
async function terminate(shape, slot, random) {
	const port = await freePort();
	const child = spawn(process.execPath, [cli, '--workers', '2', '--adaptive-reject', 'on', '--reject-period', `${REJECT_PERIOD_MS}ms`, '--grace-period', '40s', app], {env: {...process.env, PORT: String(port)}, stdio: ['ignore', 'pipe', 'ignore'], detached: true});
	const lines = [];
	const waiting = new Set();
	readline.createInterface({input: child.stdout}).on('line', text => {
		try {
			const line = JSON.parse(text);
			lines.push(line);
			for (const wait of waiting) {
				wait(line);
			}
		} catch {}
	});
	const exited = new Promise(resolve => {
		child.once('exit', resolve);
	});
	const waitFor = async (test, count = 1) => new Promise(resolve => {
		let seen = lines.filter(test).length;
		if (seen >= count) {
			resolve();
			return;
		}

		const wait = line => {
			if (test(line) && ++seen >= count) {
				waiting.delete(wait);
				resolve();
			}
		};

		waiting.add(wait);
	});
	await waitFor(line => line.msg === 'worker listening', 2);

	const {warmupMs} = SHAPES[shape];
	const peers = SHAPES[shape].peers(random);
	const results = [];
	const t0 = performance.now() + warmupMs;
	const sends = peers.flatMap((peer, index) => {
		const agent = new http.Agent({keepAlive: peer.keepAlive, maxSockets: peer.sockets ?? 8});
		const localAddress = `127.0.${slot + 1}.${index + 2}`;
		return peer.times.filter(at => at >= -warmupMs).map(at => (async () => {
			await sleep(Math.max(0, t0 + at - performance.now()));
			const sentMs = performance.now() - t0;
			const outcome = await new Promise(resolve => {
				const request = http.get({host: '127.0.0.1', port, path: '/', agent, localAddress}, response => {
					response.resume();
					response.on('end', () => resolve(String(response.statusCode)));
				});
				request.on('error', error => resolve(error.code ?? 'error'));
				request.setTimeout(5000, () => request.destroy(Object.assign(new Error('timeout'), {code: 'ETIMEDOUT'})));
			});
			results.push({peer: index, sentMs, outcome});
		})());
	});
	await sleep(Math.max(0, t0 - performance.now()));
	process.kill(child.pid, 'SIGTERM');
	await Promise.all(sends);
	await Promise.race([exited, sleep(45_000)]);
	try {
		process.kill(-child.pid, 'SIGKILL');
	} catch {}

	const finished = lines.find(line => line.role === 'primary' && line.msg === 'drain finished') ?? {};
	const failed = results.filter(result => result.outcome !== '200' && result.outcome !== '503');
	const lastStopMs = Math.max(...peers.map(peer => peer.stop));
	if (values.verbose) {
		const ended = lines.find(line => line.msg === 'reject phase ended early: the load balancers have stopped sending');
		console.error(JSON.stringify({shape, stops: peers.map(peer => Math.round(peer.stop)), rejectEndedMs: finished.rejectEndedMs, lastArrivalMs: finished.lastArrivalMs, peers: ended?.peers ?? finished.advice}));
	}

	return {failed: failed.length, failures: failed.slice(0, 3), sent: results.length, rejectEnd: finished.rejectEnd, rejectEndedMs: finished.rejectEndedMs, lastStopMs, exitCode: finished.exitCode};
}

const median = list => {
	const sorted = [...list].sort((a, b) => a - b);
	return sorted.length === 0 ? Number.NaN : sorted[Math.floor((sorted.length - 1) / 2)];
};

const terminations = Number(values.terminations);
const parallel = Number(values.parallel);
const shapes = values.only ? values.only.split(',') : Object.keys(SHAPES);
const rows = [];
let anyFailed = false;
for (const shape of shapes) {
	if (!SHAPES[shape]) {
		console.error(`unknown shape ${shape}; one of ${Object.keys(SHAPES).join(', ')}`);
		process.exit(2);
	}

	const random = seeded(Number(values.seed) + shapes.indexOf(shape));
	const runs = [];
	for (let start = 0; start < terminations; start += parallel) {
		const batch = Array.from({length: Math.min(parallel, terminations - start)}, (_, slot) => terminate(shape, slot, random));
		runs.push(...await Promise.all(batch));
	}

	const failed = runs.reduce((sum, run) => sum + run.failed, 0);
	anyFailed ||= failed > 0;
	const adaptive = runs.filter(run => run.rejectEnd === 'adaptive');
	const row = {
		shape,
		terminations: runs.length,
		requests: runs.reduce((sum, run) => sum + run.sent, 0),
		refused: failed,
		terminationsWithRefusals: runs.filter(run => run.failed > 0).length,
		endedEarly: adaptive.length,
		rejectMedianMs: median(runs.map(run => run.rejectEndedMs)),
		rejectMaxMs: Math.max(...runs.map(run => run.rejectEndedMs)),
		afterLastStopMedianMs: Math.round(median(runs.map(run => run.rejectEndedMs - run.lastStopMs))),
		examples: runs.flatMap(run => run.failures).slice(0, 3),
	};
	rows.push(row);
	console.log(JSON.stringify(row));
}

console.log(`\n| shape | terminations | requests | refused or reset | ended early | reject phase, median (max) | end after the last peer stopped, median | fixed period |`);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const row of rows) {
	console.log(`| ${row.shape} | ${row.terminations} | ${row.requests} | ${row.refused} (in ${row.terminationsWithRefusals}) | ${row.endedEarly} | ${(row.rejectMedianMs / 1000).toFixed(1)} s (${(row.rejectMaxMs / 1000).toFixed(1)} s) | ${(row.afterLastStopMedianMs / 1000).toFixed(1)} s | ${REJECT_PERIOD_MS / 1000} s |`);
}

process.exit(anyFailed ? 1 : 0);
