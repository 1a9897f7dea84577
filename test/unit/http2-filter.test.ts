// The HTTP/2 filter in-process: real node:http2 servers on port 0, node:http2's
// client (h2c and TLS), got for HTTP/1.1 over TLS (allowHTTP1).
import test, {type ExecutionContext} from 'ava';
import {once} from 'node:events';
import {readdir, readFile} from 'node:fs/promises';
import http from 'node:http';
import http2, {type Http2ServerRequest, type Http2ServerResponse, type ServerHttp2Session, type ServerHttp2Stream} from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import got from 'got';
import {drainableKind, Mode, type RejectedRequest} from '../../src/worker/filter.js';
import {Http2Filter, SHUTDOWN_NOTICE_MS, type Http2AnyServer} from '../../src/worker/http2-filter.js';
import {Arrivals, PEER_COUNTER, type Counted} from '../../src/worker/arrivals.js';
import {inBackground, systemClock} from '../../src/clock.js';
import type {Readiness} from '../../src/worker/readiness.js';

import {attach} from '../../src/worker/index.js';
import {ROOT} from '../helpers/cluster.js';
import {switchableCheck} from '../helpers/fakes.js';
import {connect, makeCertificate, MAX_STREAM_ID, type H2Client, type TestCertificate} from '../helpers/http2.js';

type Api = 'request' | 'stream';

interface Rig {
	server: Http2AnyServer;
	filter: Http2Filter;
	port: number;
	/** Paths the app saw. */
	seen: string[];
	/** Ends the held /hold* response for `path`. */
	release(path: string): void;
	/** Resolves once the app holds `path`. */
	held(path: string): Promise<void>;
	/** What the filter reported rejecting, HTTP/2 streams and HTTP/1.1 requests alike. */
	rejected: RejectedRequest[];
	idleCalls: number;
	warnings: Error[];
}

/** Each rig's warnings: one process listener for all the rigs of this file, which run at once. */
const warningSinks = new Set<Error[]>();
process.on('warning', warning => {
	for (const sink of warningSinks) {
		sink.push(warning);
	}
});

/**
 * An app answering `app` at once and holding /hold* until released, on the
 * compatibility API or on raw streams, behind an Http2Filter.
 */
async function rig(t: ExecutionContext, {api = 'request', tlsCert, allowHTTP1 = false, readiness}: {api?: Api; tlsCert?: TestCertificate; allowHTTP1?: boolean; readiness?: Readiness} = {}): Promise<Rig> {
	const seen: string[] = [];
	const holding = new Map<string, () => void>();
	const waiting = new Map<string, () => void>();
	const hold = (path: string, end: () => void): void => {
		holding.set(path, end);
		waiting.get(path)?.();
	};

	const server: Http2AnyServer = tlsCert ? http2.createSecureServer({key: tlsCert.key, cert: tlsCert.cert, allowHTTP1}) : http2.createServer();
	if (api === 'request') {
		server.on('request', (request: Http2ServerRequest, response: Http2ServerResponse) => {
			seen.push(request.url);
			if (request.url.startsWith('/hold')) {
				hold(request.url, () => response.end('released'));
				return;
			}

			if (request.url === '/events') {
				response.writeHead(200, {'content-type': 'text/event-stream'});
				response.write('data: hello\n\n');
				return;
			}

			if (request.url === '/echo') {
				let body = '';
				request.setEncoding('utf8');
				request.on('data', (chunk: string) => {
					body += chunk;
				});
				request.on('end', () => response.end(`echo ${body}`));
				return;
			}

			response.end('app');
		});
	} else {
		server.on('stream', (stream: ServerHttp2Stream, headers) => {
			const path = String(headers[':path']);
			seen.push(path);
			stream.on('error', () => undefined);
			if (path.startsWith('/hold')) {
				hold(path, () => {
					stream.respond({':status': 200});
					stream.end('released');
				});
				return;
			}

			if (path === '/events') {
				// Header names in any case on the stream API.
				stream.respond({':status': 200, 'Content-Type': 'text/event-stream'});
				stream.write('data: hello\n\n');
				return;
			}

			stream.respond({':status': 200});
			stream.end('app');
		});
	}

	const warnings: Error[] = [];
	warningSinks.add(warnings);
	const state = {rejected: [] as RejectedRequest[], idleCalls: 0};
	const filter = new Http2Filter(server, {
		retryAfterSeconds: 7,
		readinessPath: '/readyz',
		livenessPath: '/livez',
		onReject: request => state.rejected.push(request),
		onIdle() {
			state.idleCalls++;
		},
	});
	if (readiness) {
		filter.setReadiness(readiness);
	}

	server.listen(0, '127.0.0.1');
	await once(server, 'listening');
	t.teardown(() => {
		warningSinks.delete(warnings);
		filter.closeConnections();
		server.close();
	});
	return Object.assign(state, {
		server,
		filter,
		port: (server.address() as net.AddressInfo).port,
		seen,
		warnings,
		release(path: string) {
			holding.get(path)!();
		},
		async held(path: string) {
			if (!holding.has(path)) {
				await new Promise<void>(resolve => {
					waiting.set(path, resolve);
				});
			}
		},
	});
}

test('drainableKind: node:http and node:https servers are http1; every node:http2 server is http2; anything else undefined', t => {
	t.is(drainableKind(http.createServer()), 'http1');
	t.is(drainableKind(https.createServer()), 'http1');
	t.is(drainableKind(http2.createServer()), 'http2');
	t.is(drainableKind(http2.createSecureServer()), 'http2');
	t.is(drainableKind(http2.createSecureServer({allowHTTP1: true})), 'http2');
	t.is(drainableKind(net.createServer()), undefined);
	t.is(drainableKind(tls.createServer()), undefined);
	t.is(drainableKind({emit() {/* */}, close() {/* */}}), undefined);
	t.is(drainableKind(undefined), undefined);
});

test('attach() on anything it cannot drain throws a TypeError at the call, naming what it takes and what it got', t => {
	const accepts = /takes a server made by http\.createServer\(\), https\.createServer\(\), http2\.createServer\(\) or http2\.createSecureServer\(\)/;
	const cases: Array<[unknown, RegExp]> = [
		[net.createServer(), /got a net\.Server, which is not an HTTP server/],
		[tls.createServer(), /got a tls\.Server/],
		[{emit() {/* */}, close() {/* */}}, /got an object \(Object\)/],
		[() => undefined, /got a function \(an Express or Koa app\?/],
		[undefined, /got undefined/],
	];
	for (const [value, got] of cases) {
		const error = t.throws(() => attach(value as http.Server), {instanceOf: TypeError});
		t.regex(error.message, accepts);
		t.regex(error.message, got);
	}
});

for (const api of ['request', 'stream'] as const) {
	test(`${api} API, h2c: serving, probes answered; draining, GOAWAY(NO_ERROR, 2^31-1) at once, in-flight streams finish, new streams get the 503 without connection headers or warnings`, async t => {
		const r = await rig(t, {api});
		const before = connect(t, r.port);
		t.like(await before.request('/readyz'), {status: 200, body: 'ready\n'});
		t.like(await before.request('/livez'), {status: 200, body: 'alive\n'});
		t.like(await before.request('/'), {status: 200, body: 'app'});
		t.deepEqual(r.seen, ['/'], 'the probes never reach the app');

		const inFlight = before.request('/hold1');
		await r.held('/hold1');
		t.is(r.filter.inflight, 1);
		t.is(r.filter.sessionCount, 1);

		r.filter.setMode(Mode.REJECT);
		const notice = await before.goaway();
		t.is(notice.code, 0);
		t.is(notice.lastStreamID, MAX_STREAM_ID, 'the shutdown notice refuses nothing yet');

		// A new connection: told at once too, and its stream gets the drain 503.
		const during = connect(t, r.port);
		const rejected = await during.request('/?x=1', {method: 'POST', body: 'payload'});
		t.is(rejected.status, 503);
		t.is(rejected.headers['retry-after'], '7');
		t.is(rejected.headers['content-type'], 'text/plain; charset=utf-8');
		t.is(rejected.headers['cache-control'], 'no-store');
		t.is(rejected.headers['connection'], undefined);
		t.regex(rejected.body, /shutting down/);
		t.like(await during.goaway(), {code: 0, lastStreamID: MAX_STREAM_ID});
		t.deepEqual(r.rejected, [{method: 'POST', path: '/?x=1', remote: '127.0.0.1'}]);
		t.is(r.filter.rejected, 1);

		// The stream in flight completes whole.
		r.release('/hold1');
		t.like(await inFlight, {status: 200, body: 'released'});
		t.is(r.filter.inflight, 0);
		t.is(r.filter.served, 1);
		t.is(r.idleCalls, 1);
		t.deepEqual(r.seen, ['/', '/hold1'], 'the rejected stream never reached the app');
		t.deepEqual(r.warnings.map(warning => warning.name), [], 'no UnsupportedWarning, no warning at all');
	});
}

for (const api of ['request', 'stream'] as const) {
	test(`${api} API: during the drain a stream that closes before it completed counts as aborted, never as served: the client's RST_STREAM, its session gone; a completed one is served`, async t => {
		const r = await rig(t, {api});
		const streams: ServerHttp2Stream[] = [];
		r.server.on('stream', (stream: ServerHttp2Stream) => {
			streams.push(stream);
		});
		const first = connect(t, r.port);
		const second = connect(t, r.port);
		const served = first.open('/hold-served');
		const cancelled = first.open('/hold-cancelled');
		second.open('/hold-gone');
		await Promise.all(['/hold-served', '/hold-cancelled', '/hold-gone'].map(async path => r.held(path)));

		r.filter.setMode(Mode.REJECT);
		const closed = streams.map(async stream => once(stream, 'close'));
		r.release('/hold-served');
		t.is(await served.ended, 'released');
		cancelled.stream.close(http2.constants.NGHTTP2_CANCEL);
		second.session.destroy();
		await Promise.all(closed);
		t.is(r.filter.served, 1);
		t.is(r.filter.aborted, 2);
		t.is(r.filter.inflight, 0);
	});
}

test('readiness answers 503 while draining, 200 while retiring; liveness 200 throughout', async t => {
	const r = await rig(t);
	r.filter.setMode(Mode.DRAIN_SERVE);
	t.like(await connect(t, r.port).request('/readyz'), {status: 503, body: 'draining\n'});
	t.like(await connect(t, r.port).request('/livez'), {status: 200});
	t.like(await connect(t, r.port).request('/'), {status: 200, body: 'app'}, 'the serve phase serves');
	const r2 = await rig(t);
	r2.filter.setMode(Mode.RETIRE);
	t.like(await connect(t, r2.port).request('/readyz?full'), {status: 200});
	t.like(await connect(t, r2.port).request('/readyz', {method: 'HEAD'}), {status: 200, body: ''});
});

test('serving, a stream counts for its peer only where something reads the peers\' rates (perPeer); probes never do', async t => {
	for (const perPeer of [true, false]) {
		const server = http2.createServer((_request, response) => {
			response.end('app');
		});
		const arrivals = new Arrivals(inBackground(systemClock), {perPeer});
		const filter = new Http2Filter(server, {retryAfterSeconds: 7, readinessPath: '/readyz', livenessPath: '/livez', onIdle() {}, arrivals});
		const sessions: Array<ServerHttp2Session & Counted> = [];
		server.on('session', session => sessions.push(session));
		server.listen(0, '127.0.0.1');
		await once(server, 'listening');
		t.teardown(() => {
			filter.closeConnections();
			server.close();
		});
		const client = connect(t, (server.address() as net.AddressInfo).port);
		for (const path of ['/', '/a', '/readyz', '/b']) {
			t.is((await client.request(path)).status, 200);
		}

		t.is(sessions.length, 1);
		t.is(sessions[0]![PEER_COUNTER]?.n, perPeer ? 3 : undefined, `perPeer ${perPeer}`);
	}
});

test('stopAccepting: the final GOAWAY with the last stream id; the stream in flight finishes, then the session closes; closeConnections destroys what is left', async t => {
	const r = await rig(t);
	const busy = connect(t, r.port);
	const idle = connect(t, r.port);
	t.like(await idle.request('/'), {status: 200});
	const inFlight = busy.request('/hold');
	await r.held('/hold');
	r.filter.setMode(Mode.REJECT);
	await busy.goaway();
	r.filter.stopAccepting(false);
	const final = await busy.goaway(2);
	t.is(final.code, 0);
	t.is(final.lastStreamID, 1, 'the real last stream id');
	t.false(r.server.listening);
	// The idle session closes at once; the busy one once its stream is done.
	await idle.closed;
	t.is(r.filter.sessionCount, 1);
	r.release('/hold');
	t.like(await inFlight, {status: 200, body: 'released'});
	await busy.closed;
	t.is(r.filter.sessionCount, 0);
	t.notThrows(() => {
		r.filter.closeConnections();
	});
	// The app's own shutdown closing the server again (a gRPC or NestJS app): no ERR_SERVER_NOT_RUNNING.
	t.is(await new Promise(resolve => {
		r.server.close(resolve);
	}), undefined);
});

test('retiring: the shutdown notice at once, sessions kept through the linger, destroyed by closeConnections', async t => {
	const r = await rig(t);
	const client = connect(t, r.port);
	t.like(await client.request('/'), {status: 200});
	r.filter.setMode(Mode.RETIRE);
	t.like(await client.goaway(), {lastStreamID: MAX_STREAM_ID});
	r.filter.stopAccepting(true);
	t.false(r.server.listening);
	t.is(r.filter.sessionCount, 1, 'kept through the linger');
	r.filter.closeConnections();
	await client.closed;
	t.is(r.filter.sessionCount, 0);
});

test('TLS with allowHTTP1: HTTP/2 streams and HTTP/1.1 requests each get their own drain', async t => {
	const cert = makeCertificate(t);
	const r = await rig(t, {tlsCert: cert, allowHTTP1: true});
	const h1 = got.extend({retry: {limit: 0}, throwHttpErrors: false, https: {certificateAuthority: cert.cert}, agent: {https: new https.Agent({keepAlive: false})}});
	const base = `https://localhost:${r.port}`;
	const h2 = connect(t, r.port, cert.cert);
	t.like(await h2.request('/'), {status: 200, body: 'app'});
	const one = await h1(`${base}/`);
	t.is(one.statusCode, 200);
	t.is(one.httpVersion, '1.1');
	t.is(one.body, 'app');

	// Serve phase: HTTP/1.1 gets Connection: close, HTTP/2 a GOAWAY and no Connection header.
	r.filter.setMode(Mode.DRAIN_SERVE);
	const served = await h1(`${base}/`);
	t.is(served.statusCode, 200);
	t.is(served.headers.connection, 'close');
	t.like(await h2.goaway(), {lastStreamID: MAX_STREAM_ID});
	const h2b = connect(t, r.port, cert.cert);
	const servedH2 = await h2b.request('/');
	t.is(servedH2.status, 200);
	t.is(servedH2.headers['connection'], undefined);

	// Reject phase.
	r.filter.setMode(Mode.REJECT);
	const rejected = await h1(`${base}/h1`);
	t.is(rejected.statusCode, 503);
	t.is(rejected.headers.connection, 'close');
	t.is(rejected.headers['retry-after'], '7');
	const rejectedH2 = await connect(t, r.port, cert.cert).request('/h2');
	t.is(rejectedH2.status, 503);
	t.is(rejectedH2.headers['retry-after'], '7');
	t.is(rejectedH2.headers['connection'], undefined);
	t.deepEqual(r.rejected.map(request => request.path), ['/h1', '/h2']);
	t.is(r.filter.rejected, 2);
	t.is(r.filter.served, 2);
	r.filter.stopAccepting(false);
	t.notThrows(() => {
		r.filter.closeConnections();
	}, 'no closeAllConnections TypeError');
	t.deepEqual(r.warnings.map(warning => warning.name), []);
});

test('uninstall gives the server back', async t => {
	const r = await rig(t);
	r.filter.setMode(Mode.REJECT);
	r.filter.uninstall();
	t.like(await connect(t, r.port).request('/readyz'), {status: 200, body: 'app'}, 'no longer filtered');
});

test('the final GOAWAY follows the notice SHUTDOWN_NOTICE_MS later; a stream racing the notice on an idle session is refused then (safe to retry), never left hanging', async t => {
	const r = await rig(t);
	const client = connect(t, r.port);
	t.like(await client.request('/'), {status: 200});
	// The client sends before the notice reaches it.
	const racing = client.request('/race');
	// Timed from when the server sends the notice: the client may read it late
	// on a busy machine, but cannot read the final one before it is sent.
	const drainAt = Date.now();
	r.filter.setMode(Mode.DRAIN_SERVE);
	const notice = await client.goaway();
	t.is(notice.lastStreamID, MAX_STREAM_ID);
	const final = await client.goaway(2);
	t.is(final.lastStreamID, 1, 'the racing stream 3 was not processed');
	t.true(final.at - drainAt >= SHUTDOWN_NOTICE_MS - 5, `${final.at - drainAt} ms from the notice to the final GOAWAY`);
	const error = await t.throwsAsync(racing);
	t.regex(String(error?.message), /REFUSED_STREAM/);
	t.deepEqual(r.seen, ['/']);
	await client.closed;
});

/** Opens `path` as an event stream (`accept: text/event-stream`) and resolves with its status once the first event arrived. */
async function openEvents(client: H2Client, path = '/events') {
	const events = client.open(path, {headers: {accept: 'text/event-stream'}});
	const {status} = await events.response;
	if (events.text() === '') {
		await once(events.stream, 'data');
	}

	return {status, ended: events.ended, stream: events.stream};
}

for (const api of ['request', 'stream'] as const) {
	test(`${api} API: an HTTP/2 event stream is sorted out of inflight at drain time, counted in streams, ended cleanly by closeLongLived; its session then closes`, async t => {
		const r = await rig(t, {api});
		const client = connect(t, r.port);
		const events = await openEvents(client);
		t.is(events.status, 200);
		t.is(r.filter.inflight, 1, 'while serving, nothing is sorted: a stream in flight');
		r.filter.setMode(Mode.DRAIN_SERVE);
		r.filter.sortLongLived();
		t.is(r.filter.inflight, 0, 'the event stream never holds the drain');
		t.is(r.filter.streams, 1);
		r.filter.setMode(Mode.REJECT);
		r.filter.stopAccepting(false);
		t.deepEqual(r.filter.closeLongLived('shutdown'), {upgrades: 0, streams: 1});
		t.is(await events.ended, 'data: hello\n\n', 'a clean end (END_STREAM), not a reset');
		await client.closed;
		t.is(r.filter.streams, 0);
		t.is(r.filter.served, 0, 'an event stream is not a served request');
		t.is(r.idleCalls, 1, 'the drain hears of its close: it waits for the streams it ended to finish');
	});

	test(`${api} API: an HTTP/2 event stream still open when the wait for its end is over is cut by cutLongLived: off the count at once, once; its client sees it close`, async t => {
		const r = await rig(t, {api});
		const events = await openEvents(connect(t, r.port));
		r.filter.setMode(Mode.REJECT);
		r.filter.sortLongLived();
		t.is(r.filter.streams, 1);
		const closed = once(events.stream, 'close');
		t.deepEqual(r.filter.cutLongLived(), {upgrades: 0, streams: 1});
		t.is(r.filter.streams, 0, 'off the count before its close comes');
		await closed;
		t.deepEqual(r.filter.cutLongLived(), {upgrades: 0, streams: 0}, 'cut once');
	});
}

test('reject phase: a new HTTP/2 event stream gets a 200 with retry: and an end (EventSource reconnects), not a 503', async t => {
	const r = await rig(t);
	r.filter.setMode(Mode.REJECT);
	const response = await connect(t, r.port).request('/events', {headers: {accept: 'text/event-stream'}});
	t.is(response.status, 200);
	t.is(response.headers['content-type'], 'text/event-stream');
	t.is(response.headers['cache-control'], 'no-store');
	t.is(response.headers['connection'], undefined);
	t.is(response.body, 'retry: 7000\n\n');
	t.is(r.filter.rejected, 1);
	t.deepEqual(r.seen, []);
});

test('retiring: streams sent after the session\'s notice never reach the filter nor the app: nghttp2 refuses them (REFUSED_STREAM, safe to retry); the stream in flight finishes', async t => {
	const r = await rig(t);
	const client = connect(t, r.port);
	// A stream in flight: nghttp2 keeps reading the session after the notice.
	const hold = client.request('/hold');
	await r.held('/hold');
	r.filter.setMode(Mode.RETIRE);
	r.filter.stopAccepting(true);
	// Sent in the same tick: after the server sent the notice, before the client read it.
	const late = [client.request('/events', {headers: {accept: 'text/event-stream'}}), client.request('/plain')];
	for (const request of late) {
		const error = await t.throwsAsync(request);
		t.regex(String(error?.message), /REFUSED_STREAM/);
	}

	t.like(client.goaways[0], {code: 0, lastStreamID: MAX_STREAM_ID});
	r.release('/hold');
	t.like(await hold, {status: 200, body: 'released'});
	t.deepEqual(r.seen, ['/hold']);
	t.is(r.filter.redirected, 0);
	t.is(r.filter.rejected, 0);
});

test('retiring: a session opened since gets its GOAWAY with its first stream, before a new event stream\'s retry: 250; a WebSocket (extended CONNECT) gets 503 + retry-after: 0', async t => {
	const r = await rig(t);
	r.server.updateSettings({enableConnectProtocol: true});
	r.filter.setMode(Mode.RETIRE);
	const client = connect(t, r.port);
	const stream = await client.request('/events', {headers: {accept: 'text/event-stream'}});
	t.like(client.goaways, [{code: 0, lastStreamID: MAX_STREAM_ID}], 'the notice came before the answer');
	t.like(stream, {status: 200, body: 'retry: 250\n\n'});

	const ws = connect(t, r.port);
	await once(ws.session, 'remoteSettings');
	t.true(ws.session.remoteSettings.enableConnectProtocol);
	const handshake = await ws.request('/ws', {method: 'CONNECT', headers: {':protocol': 'websocket'}});
	t.is(handshake.status, 503);
	t.is(handshake.headers['retry-after'], '0');
	t.regex(handshake.body, /being replaced/);
	t.deepEqual(r.seen, []);
	t.is(r.filter.redirected, 2);
	t.is(r.filter.rejected, 0);
});

/** A POST with `expect: 100-continue` that sends its body only after the 100; resolves with the answer and whether a 100 came. */
async function expectContinue(client: H2Client, path = '/echo') {
	const {stream, response, ended} = client.open(path, {method: 'POST', headers: {expect: '100-continue'}, endStream: false});
	let continued = false;
	stream.on('continue', () => {
		continued = true;
		stream.end('payload');
	});
	const {status} = await response;
	if (!continued) {
		stream.close();
	}

	return {status, body: await ended, continued};
}

test('Expect: 100-continue on HTTP/2: serving, the 100 then the app; with the app\'s own checkContinue listener, the app decides; rejecting, the 503 without a 100', async t => {
	const r = await rig(t);
	const client = connect(t, r.port);
	t.like(await expectContinue(client), {status: 200, body: 'echo payload', continued: true});
	t.deepEqual(r.seen, ['/echo']);

	const asked: string[] = [];
	const own = (request: Http2ServerRequest, response: Http2ServerResponse): void => {
		asked.push(request.url);
		response.writeContinue();
		r.server.emit('request', request, response);
	};

	r.server.on('checkContinue', own);
	t.like(await expectContinue(client), {status: 200, body: 'echo payload', continued: true});
	t.deepEqual(asked, ['/echo']);
	r.server.off('checkContinue', own);

	r.filter.setMode(Mode.REJECT);
	t.like(await expectContinue(connect(t, r.port)), {status: 503, continued: false});
	t.is(r.filter.rejected, 1);
	t.deepEqual(r.seen, ['/echo', '/echo'], 'the rejected one never reached the app');
	t.is(r.filter.requests, 2);
});

test('TLS with allowHTTP1: Expect: 100-continue works over HTTP/1.1 too; requests counts HTTP/2 streams and HTTP/1.1 requests, probes and rejects not', async t => {
	const cert = makeCertificate(t);
	const r = await rig(t, {tlsCert: cert, allowHTTP1: true});
	const h1 = got.extend({retry: {limit: 0}, throwHttpErrors: false, timeout: {request: 5000}, https: {certificateAuthority: cert.cert}, agent: {https: new https.Agent({keepAlive: false})}});
	const base = `https://localhost:${r.port}`;
	const h2 = connect(t, r.port, cert.cert);
	t.like(await expectContinue(h2), {status: 200, body: 'echo payload', continued: true});
	const continued = await h1.post(`${base}/echo`, {body: 'payload', headers: {expect: '100-continue'}});
	t.is(continued.statusCode, 200);
	t.is(continued.body, 'echo payload');
	t.like(await h2.request('/'), {status: 200});
	t.like(await h2.request('/readyz'), {status: 200});
	t.is((await h1(`${base}/livez`)).statusCode, 200);
	t.is((await h1(`${base}/`)).statusCode, 200);
	t.is(r.filter.requests, 4, 'two HTTP/2 streams, two HTTP/1.1 requests');
	r.filter.setMode(Mode.REJECT);
	t.like(await connect(t, r.port, cert.cert).request('/'), {status: 503});
	t.is((await h1(`${base}/`)).statusCode, 503);
	t.is(r.filter.requests, 4);
});

test('readiness checks run for HTTP/2 probes as for HTTP/1.1 ones on the same server; a drain answers 503 at once, without them', async t => {
	const cert = makeCertificate(t);
	const db = switchableCheck();
	const r = await rig(t, {tlsCert: cert, allowHTTP1: true, readiness: db.readiness});
	const h1 = got.extend({retry: {limit: 0}, throwHttpErrors: false, timeout: {request: 5000}, https: {certificateAuthority: cert.cert}, agent: {https: new https.Agent({keepAlive: false})}});
	const h2 = connect(t, r.port, cert.cert);
	t.like(await h2.request('/readyz'), {status: 200, body: 'ready\n'});
	db.ok = false;
	t.like(await h2.request('/readyz'), {status: 503, body: 'db: not ready\n'});
	t.like(await h2.request('/readyz', {method: 'HEAD'}), {status: 503, body: ''});
	const overHttp1 = await h1(`https://localhost:${r.port}/readyz`);
	t.is(overHttp1.statusCode, 503);
	t.is(overHttp1.body, 'db: not ready\n', 'one answer whatever the protocol');
	t.like(await h2.request('/livez'), {status: 200}, 'liveness never runs them');
	t.is(db.runs, 4);
	r.filter.setMode(Mode.DRAIN_SERVE);
	t.like(await connect(t, r.port, cert.cert).request('/readyz'), {status: 503, body: 'draining\n'});
	t.is(db.runs, 4, 'not run during a drain');
	t.deepEqual(r.seen, []);
});

test('the shipped helper writes no HTTP/2 pseudo-header name as a literal of its own: node:http2\'s constants are used', async t => {
	// A `':status'` literal made V8's copy of the name the canonical one before
	// node:http2 first used its own constant as a key; Node's compatibility
	// response then set `:status` the slow way on every response, about 4 % of
	// an h2c hello world's CPU, whether attach() was called or the helper only
	// imported (http2-answers.ts `headerNames`). A speed figure belongs in
	// bench/; this keeps the cause from coming back.
	const directory = path.join(ROOT, 'dist/bundle/worker');
	const files = (await readdir(directory)).filter(name => name.endsWith('.js') || name.endsWith('.cjs'));
	t.true(files.length >= 3, `the worker bundle is there: ${files.join(', ')}`);
	for (const name of files) {
		const code = await readFile(path.join(directory, name), 'utf8');
		t.deepEqual(code.match(/(["'`]):(?:status|path|method|protocol|authority|scheme)\1/g) ?? [], [], name);
	}
});

test('shedding (--max-event-loop-delay): a new stream gets 503 + retry-after and never reaches the app; no GOAWAY, the stream in flight finishes on the same session; a gRPC call gets UNAVAILABLE; back to serving', async t => {
	const r = await rig(t);
	const client = connect(t, r.port);
	const hold = client.request('/hold');
	await r.held('/hold');
	r.filter.setMode(Mode.SHED);
	const shed = await client.request('/new');
	t.is(shed.status, 503);
	t.is(shed.headers['retry-after'], '7');
	t.regex(shed.body, /overloaded/);
	const grpc = await client.request('/svc/Method', {method: 'POST', headers: {'content-type': 'application/grpc'}});
	t.is(grpc.headers['grpc-status'], '14');
	t.is((await client.request('/livez')).status, 200);
	t.is((await client.request('/readyz')).status, 200);
	t.deepEqual(client.goaways, [], 'the session stays open');
	r.filter.setMode(Mode.SERVING);
	r.release('/hold');
	t.like(await hold, {status: 200, body: 'released'});
	t.like(await client.request('/after'), {status: 200, body: 'app'});
	t.is(r.filter.shed, 2);
	t.is(r.filter.rejected, 0);
	t.deepEqual(r.seen, ['/hold', '/after']);
});
