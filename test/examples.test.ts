// Every app in examples/ started under the real CLI, loaded, then drained by a
// SIGTERM to the primary with a request in flight (the WebSocket and SSE ones
// with their connections open): what a user who copies an example gets on
// their first rolling update.
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import test from 'ava';
import type {Response} from 'got';
import {HandshakeRejected, openEventSource, openWs} from '../testkit/long-lived.js';
import {url} from '../testkit/net.js';
import {eventually, waitUntil} from '../testkit/proc.js';
import {ROOT, startCluster} from './helpers/cluster.js';
import {client, RawConnection} from './helpers/http.js';

interface Example {
	readonly name: string;
	readonly script: string;
	/** The body of `GET /`. */
	readonly hello: RegExp;
	/** examples/hello predates the size parameter: its /slow answers a short text. */
	readonly sized: boolean;
}

const EXAMPLES: readonly Example[] = [
	{name: 'node:http (ESM)', script: 'examples/hello/server.js', hello: /^hello from pid \d+\n$/, sized: false},
	{name: 'node:http (CommonJS)', script: 'examples/commonjs/server.cjs', hello: /^hello from commonjs \(pid \d+\)\n$/, sized: true},
	{name: 'Express', script: 'examples/express/server.js', hello: /^hello from express \(pid \d+\)\n$/, sized: true},
	{name: 'Fastify', script: 'examples/fastify/server.js', hello: /^hello from fastify \(pid \d+\)\n$/, sized: true},
	{name: 'Koa', script: 'examples/koa/server.js', hello: /^hello from koa \(pid \d+\)\n$/, sized: true},
];

// The reject phase must outlast the checks made during it on a busy 2-core
// machine; the slow request outlasts the reject phase, so the drain has to wait
// for it after the workers stopped listening.
const REJECT_MS = 3000;
const SLOW_MS = 4500;
const SLOW_SIZE = 100_000;
const LOAD = 30;

/** `count` GETs, `concurrency` at a time; resolves with every response. */
async function load(port: number, route: string, count: number, concurrency = 3): Promise<Array<Response<string>>> {
	const responses: Array<Response<string>> = [];
	let next = 0;
	await Promise.all(Array.from({length: concurrency}, async () => {
		while (next < count) {
			next++;
			responses.push(await client(url(port, route)));
		}
	}));
	return responses;
}

for (const example of EXAMPLES) {
	test.serial(`${example.name}: ${example.script} serves under load, then drains on SIGTERM without dropping the request in flight`, async t => {
		t.timeout(45_000);
		const app = await startCluster(t, ['--reject-period', `${REJECT_MS}ms`, '--grace-period', '15s'], path.join(ROOT, example.script), {env: {PORT: '0'}});

		// Serving: probes 200, the app answers every request of a little load.
		t.is((await client(url(app.port, '/readyz'))).statusCode, 200);
		t.is((await client(url(app.port, '/livez'))).statusCode, 200);
		const before = await load(app.port, '/', LOAD);
		t.is(before.length, LOAD);
		for (const response of before) {
			t.is(response.statusCode, 200);
			t.regex(response.body, example.hello);
		}

		// A keep-alive connection: --keep-alive-timeout (65 s by default) reached the
		// framework's server, and the connection stays open, idle, into the drain.
		const keepAlive = await RawConnection.open(app.port);
		const first = await keepAlive.request('/');
		t.is(first.status, 200);
		t.is(first.headers['keep-alive'], 'timeout=65', 'the server announces the 65 s keep-alive timeout');

		// A request in flight when the signal comes.
		const slowRoute = example.sized ? `/slow?ms=${SLOW_MS}&size=${SLOW_SIZE}` : `/slow?ms=${SLOW_MS}`;
		const slow = client(url(app.port, slowRoute));
		await app.waitForLog('example: slow request started');

		app.kill('SIGTERM');
		await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});

		// Draining: readiness fails, liveness holds.
		t.is((await client(url(app.port, '/readyz'))).statusCode, 503);
		t.is((await client(url(app.port, '/livez'))).statusCode, 200);

		// New requests are rejected before the framework sees them.
		const during = await load(app.port, '/', 10);
		for (const response of during) {
			t.is(response.statusCode, 503);
			t.is(response.headers['connection'], 'close');
			t.is(response.headers['retry-after'], '1');
			t.regex(response.body, /shutting down/);
		}

		// So is the next request on the idle keep-alive connection: a 503, not a reset.
		const onKeepAlive = await keepAlive.request('/');
		t.is(onKeepAlive.status, 503);
		t.is(onKeepAlive.headers['connection'], 'close');
		t.is(onKeepAlive.headers['retry-after'], '1');
		keepAlive.close();

		// The request in flight completes, whole, and its connection closes.
		const done = await slow;
		t.is(done.statusCode, 200);
		t.is(done.headers['connection'], 'close');
		if (example.sized) {
			t.is(done.body.length, SLOW_SIZE);
			t.true(done.body.startsWith(`waited ${SLOW_MS} ms\n`));
		} else {
			t.regex(done.body, /^hello from pid \d+\n$/);
		}

		const exit = await app.exited;
		t.is(exit.code, 0, app.text());
		t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
		t.is(app.lines.filter(line => line.msg === 'example: shutdown hook ran').length, 2, 'each worker ran the app\'s shutdown hook');
		const exits = app.lines.filter(line => line.msg === 'worker exited');
		t.is(exits.length, 2);
		t.deepEqual(exits.filter(line => line.level !== 'info'), [], 'no worker exit is logged as an error');
		t.deepEqual(app.lines.filter(line => line.level === 'error' || line.level === 'fatal'), [], 'no error lines at all');
	});
}

test.serial('WebSocket (ws): examples/websocket/server.js closes its WebSockets itself through onDrain (1001, spread out) under echo load; new handshakes get the 503; exit 0', async t => {
	t.timeout(45_000);
	const app = await startCluster(t, ['--reject-period', `${REJECT_MS}ms`, '--grace-period', '15s'], path.join(ROOT, 'examples/websocket/server.js'), {env: {PORT: '0'}});
	const sockets = Array.from({length: 40}, () => openWs(`ws://127.0.0.1:${app.port}/`));
	await Promise.all(sockets.map(async socket => socket.opened));
	// Load: every client echoes in a loop until its socket closes.
	let echoed = 0;
	const loops = sockets.map(async socket => {
		while (socket.ws.readyState === socket.ws.OPEN) {
			const reply = await Promise.race([socket.echo(`m${echoed}`), socket.closed.then(() => undefined)]);
			if (reply !== undefined) {
				echoed++;
			}
		}
	});
	// The signal comes under load: once the clients have echoed as many messages as there are clients.
	await waitUntil(() => echoed >= sockets.length, {timeout: 10_000, what: 'the echo load under way'});

	const signalledAt = performance.now();
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});
	const late = openWs(`ws://127.0.0.1:${app.port}/`);
	const refused = await late.opened.then(() => undefined, (error: unknown) => error);
	t.true(refused instanceof HandshakeRejected && refused.status === 503 && refused.headers['retry-after'] === '1', String(refused));

	const closes = await Promise.all(sockets.map(async socket => socket.closed));
	await Promise.all(loops);
	t.true(echoed > 100, `${echoed} echoes`);
	t.deepEqual([...new Set(closes.map(close => close.code))], [1001], 'every client saw 1001, none 1006');
	const times = closes.map(close => close.at - signalledAt);
	t.log(`40 WebSockets closed by the app between ${Math.round(Math.min(...times))} and ${Math.round(Math.max(...times))} ms after SIGTERM; ${echoed} echoes`);
	t.true(Math.max(...times) - Math.min(...times) > REJECT_MS / 4, 'spread out, not all at once');
	t.true(Math.max(...times) < REJECT_MS, 'all closed before the reject phase ends');

	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.true(performance.now() - signalledAt < REJECT_MS + 2000);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0, closedLongLived: 0});
	t.is(app.lines.filter(line => line.msg === 'example: shutdown hook ran').length, 2);
	t.deepEqual(app.lines.filter(line => line.level === 'error' || line.level === 'fatal'), [], 'no error lines at all');
});

test.serial('Server-sent events: examples/sse/server.js ends its streams through onDrain under load; EventSource reconnects and is sent away with a retry:, never failed; exit 0', async t => {
	t.timeout(45_000);
	const app = await startCluster(t, ['--reject-period', `${REJECT_MS}ms`, '--grace-period', '15s'], path.join(ROOT, 'examples/sse/server.js'), {env: {PORT: '0'}});
	const sources = Array.from({length: 20}, () => openEventSource(url(app.port, '/events')));
	// Closed whatever an assertion says: one left open reconnects forever and holds the run.
	t.teardown(() => {
		for (const source of sources) {
			source.source.close();
		}
	});
	await Promise.all(sources.map(async source => source.opened));
	const hello = await load(app.port, '/', LOAD);
	t.true(hello.every(response => response.statusCode === 200));
	// Each stream ticks every 250 ms: until each has ticked twice (bounded; the assertion says if not).
	await eventually(() => sources.every(source => source.messages.length >= 2), {timeout: 10_000, interval: 20});
	t.true(sources.every(source => source.messages.length >= 2), 'every stream ticks');

	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'rejecting new requests', {count: 2});
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	for (const source of sources) {
		t.true(source.errors.length >= 1, 'the stream ended');
		t.not(source.source.readyState, source.source.CLOSED, 'EventSource still reconnecting: it was never failed by a 503');
	}

	const reconnected = sources.filter(source => source.opens >= 2).length;
	t.log(`${reconnected} of 20 EventSources reconnected during the reject phase and got 200 + retry:`);
	t.true(reconnected >= 15);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
	t.is(app.lines.filter(line => line.msg === 'example: shutdown hook ran').length, 2);
	t.deepEqual(app.lines.filter(line => line.level === 'error' || line.level === 'fatal'), [], 'no error lines at all');
});
