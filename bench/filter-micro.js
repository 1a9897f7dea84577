// The request filter's own cost per request, without I/O: a real
// http.Server, real IncomingMessage/ServerResponse objects on 20 (unconnected)
// sockets, 20 responses in flight, 1M requests through `server.emit('request')`, in a fresh process per
// run (so that builds do not share V8's type feedback), runs alternating.
// Less sensitive to a busy machine than req/s, since nothing waits on I/O.
//
//   node filter-micro.js                      # the build under test vs no filter
//   node filter-micro.js <distA> <distB>      # two builds (dirs holding src/) vs no filter
import {execFileSync} from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import process from 'node:process';
import {summary} from './lib/stats.js';

const N = 1_000_000;
const INFLIGHT = 20;

async function child(dist) {
	const server = http.createServer(() => {});
	if (dist !== 'bare') {
		// The HTTP/1.1 adapter; builds before the worker's split called it request-filter.js.
		const {existsSync} = await import('node:fs');
		const file = existsSync(`${dist}/src/worker/http1-filter.js`) ? 'http1-filter.js' : 'request-filter.js';
		const {RequestFilter} = await import(`${dist}/src/worker/${file}`);
		// eslint-disable-next-line no-new -- the filter installs itself on the server
		new RequestFilter(server, {retryAfterSeconds: 1, readinessPath: '/readyz', livenessPath: '/livez', onIdle() {}});
	}

	const ring = Array.from({length: INFLIGHT});
	// Requests come on kept-alive connections, as a load balancer's do: the
	// filter's per-request work on the connection (the peer's counter since
	// issue 19) is measured. Each response is given its socket, as Node does
	// for a request that is not pipelined.
	const sockets = Array.from({length: INFLIGHT}, () => new net.Socket());
	const started = process.hrtime.bigint();
	for (let i = 0; i < N; i++) {
		const socket = sockets[i % INFLIGHT];
		const request = new http.IncomingMessage(socket);
		request.url = '/';
		const response = new http.ServerResponse(request);
		response.socket = socket;
		server.emit('request', request, response);
		ring[i % INFLIGHT]?.emit('close');
		ring[i % INFLIGHT] = response;
	}

	process.stdout.write(String(Number(process.hrtime.bigint() - started) / N));
}

/** ns per request for each of `dists` (and 'bare'), median of `rounds` alternating runs. */
export function measureFilter(dists, rounds = 6) {
	const names = ['bare', ...dists];
	const times = Object.fromEntries(names.map(name => [name, []]));
	for (let round = 0; round < rounds; round++) {
		const order = names.map((_, i) => names[(i + round) % names.length]);
		for (const name of order) {
			const out = execFileSync(process.execPath, [new URL(import.meta.url).pathname, '--child', name], {encoding: 'utf8', timeout: 60_000});
			times[name].push(Number(out));
		}
	}

	return Object.fromEntries(names.map(name => [name, summary(times[name])]));
}

if (process.argv[2] === '--child') {
	await child(process.argv[3]);
} else if (process.argv[1] === new URL(import.meta.url).pathname) {
	const dists = process.argv.slice(2);
	const result = measureFilter(dists.length > 0 ? dists : [new URL('../dist', import.meta.url).pathname]);
	const bare = result.bare.median;
	for (const [name, s] of Object.entries(result)) {
		process.stdout.write(`${name}: ${s.median.toFixed(0)} ns/request (${s.min.toFixed(0)}-${s.max.toFixed(0)})${name === 'bare' ? '' : `, filter ${(s.median - bare).toFixed(0)} ns`}\n`);
	}
}
