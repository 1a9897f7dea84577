// The request filter in-process: a real http.Server on port 0, real sockets.
import test from 'ava';
import {Writable} from 'node:stream';
import {endOwnedStream} from '../../src/worker/long-lived.js';
import {EventEmitter, once} from 'node:events';
import {Readable} from 'node:stream';
import {pEvent} from 'p-event';
import http, {type IncomingMessage, type ServerResponse} from 'node:http';
import https from 'node:https';
import net, {type AddressInfo} from 'node:net';
import {setImmediate as nextTick} from 'node:timers/promises';
import {Mode} from '../../src/worker/filter.js';
import {RequestFilter} from '../../src/worker/http1-filter.js';
import {url} from '../../testkit/net.js';
import {waitUntil} from '../../testkit/proc.js';
import {switchableCheck} from '../helpers/fakes.js';
import {client, rawExchange, RawConnection, UPGRADE_REQUEST as UPGRADE} from '../helpers/http.js';

interface Rig {
	server: http.Server;
	filter: RequestFilter;
	url: (path: string) => string;
	port: number;
	/** Requests the app saw. */
	seen: string[];
	/** Responses the app is holding, by path; `release(path)` ends one. */
	release: (path: string) => void;
	/** Resolves once the app holds a /hold* request sent after this call. */
	held: () => Promise<unknown>;
	response: (path: string) => ServerResponse;
	rejectedUrls: string[];
	idleCalls: number;
	/** Resolves the first time the filter reports it is idle. */
	idle: Promise<void>;
}

async function rig(t: import('ava').ExecutionContext, {lingerMs}: {lingerMs?: number} = {}): Promise<Rig> {
	const seen: string[] = [];
	const holding = new Map<string, ServerResponse>();
	const server = http.createServer((request: IncomingMessage, response: ServerResponse) => {
		seen.push(request.url!);
		if (request.url!.startsWith('/hold')) {
			holding.set(request.url!, response);
			return;
		}

		response.end('app');
	});
	const events = new EventEmitter();
	const state = {rejectedUrls: [] as string[], idleCalls: 0, idle: once(events, 'idle').then(() => undefined)};
	const filter = new RequestFilter(server, {
		retryAfterSeconds: 7,
		readinessPath: '/readyz',
		livenessPath: '/livez',
		onReject: request => state.rejectedUrls.push(request.path!),
		onIdle() {
			state.idleCalls++;
			events.emit('idle');
		},
		lingerMs: lingerMs === undefined ? undefined : () => lingerMs,
	});
	await once(server.listen(0, '127.0.0.1'), 'listening');
	t.teardown(() => {
		server.closeAllConnections();
		server.close();
	});
	const {port} = server.address() as AddressInfo;
	return Object.assign(state, {
		server,
		filter,
		port,
		seen,
		url: (path: string) => url(port, path),
		release(path: string) {
			holding.get(path)!.end('released');
		},
		response: (path: string) => holding.get(path)!,
		// After the app's own listener, which has put the response in `holding`.
		held: async () => pEvent(server, 'request', {filter: (request: IncomingMessage) => request.url!.startsWith('/hold'), timeout: 5000}),
	});
}

test('serving: probes answered before the app, everything else passed through', async t => {
	const r = await rig(t);
	const ready = await client(r.url('/readyz'));
	t.is(ready.statusCode, 200);
	t.is(ready.body, 'ready\n');
	t.is((await client(r.url('/readyz?verbose=1'))).statusCode, 200);
	t.is((await client(r.url('/livez'))).body, 'alive\n');
	t.is((await client(r.url('/readyzz'))).body, 'app', 'only the exact path is a probe');
	t.is((await client(r.url('/'))).body, 'app');
	t.deepEqual(r.seen, ['/readyzz', '/']);
});

test('in-flight counting: up on a request, down on close, also when the client goes away', async t => {
	const r = await rig(t);
	const held = r.held();
	const controller = new AbortController();
	const request = client(r.url('/hold-abort'), {signal: controller.signal}).catch(() => 'aborted');
	await held;
	t.is(r.filter.inflight, 1);
	const closed = once(r.response('/hold-abort'), 'close');
	controller.abort();
	t.is(await request, 'aborted');
	await closed;
	t.is(r.filter.inflight, 0, 'an aborted response never emits finish, but it does emit close');
});

test('drain: a response that closes without completing counts as aborted, never as served: the client left, the app destroyed it, the client left before reading a body the app had ended; a whole one is served', async t => {
	const r = await rig(t);
	const paths = ['/hold-served', '/hold-left', '/hold-destroyed', '/hold-unread'];
	const connections = await Promise.all(paths.map(async () => RawConnection.open(r.port)));
	for (const [index, path] of paths.entries()) {
		const held = r.held();
		connections[index]!.socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
		await held;
	}

	const [served, left, , unread] = connections;

	r.filter.setMode(Mode.REJECT);
	const closed = paths.map(async path => once(r.response(path), 'close'));
	r.release('/hold-served');
	t.is((await served!.readResponse()).body, 'released');
	left!.close();
	r.response('/hold-destroyed').destroy();
	// More than the socket buffers hold: Node emits 'finish' for it all the same,
	// though the client, gone, never read most of it.
	r.response('/hold-unread').end(Buffer.alloc(64 * 1024 * 1024));
	unread!.close();
	await Promise.all(closed);
	t.is(r.filter.served, 1);
	t.is(r.filter.aborted, 3);
	t.is(r.filter.inflight, 0);
});

test('drain: a response the app ended whole, then cut while still in the socket\'s buffer by the app\'s own error on its socket, counts as aborted: Node emits its finish all the same', async t => {
	// 32 MB to a client that reads nothing: most of it still waits in the socket's
	// buffer when the app destroys the socket (with an error) or writes to it after
	// ending it (ERR_STREAM_WRITE_AFTER_END, which destroys it too).
	const size = 32 * 1024 * 1024;
	const cuts: Record<string, (socket: net.Socket) => void> = {
		'destroy(error)'(socket) {
			socket.destroy(new Error('the app\'s own'));
		},
		'a write after end'(socket) {
			socket.end();
			socket.write('late', () => undefined);
		},
	};
	for (const [name, cutSocket] of Object.entries(cuts)) {
		const r = await rig(t);
		const connection = await RawConnection.open(r.port);
		const held = r.held();
		connection.socket.write('GET /hold-big HTTP/1.1\r\nHost: x\r\n\r\n');
		await held;
		connection.socket.pause();
		let received = 0;
		connection.socket.on('data', (chunk: string | Buffer) => {
			received += chunk.length;
		});
		r.filter.setMode(Mode.REJECT);
		const response = r.response('/hold-big');
		const closed = once(response, 'close');
		response.setHeader('Content-Length', size);
		response.end(Buffer.alloc(size));
		cutSocket(response.socket!);
		await closed;
		connection.socket.resume();
		await once(connection.socket, 'close');
		t.true(received < size, `${name}: the client got ${received} of ${size} bytes`);
		t.true(response.writableFinished, `${name}: Node says the response finished`);
		t.is(r.filter.served, 0, name);
		t.is(r.filter.aborted, 1, name);
	}
});

test('drain: a response in flight gets Connection: close, and the last one to finish calls onIdle', async t => {
	const r = await rig(t);
	const connection = await RawConnection.open(r.port);
	const held = r.held();
	const pending = connection.request('/hold-1');
	await held;
	r.filter.setMode(Mode.DRAIN_SERVE);
	r.release('/hold-1');
	const response = await pending;
	t.is(response.status, 200);
	t.is(response.headers['connection'], 'close');
	t.is(await connection.closedByServer(), 'fin');
	t.is(r.idleCalls, 1);
	t.is(r.filter.served, 1);
});

test('serve phase: new requests reach the app with Connection: close; readiness fails', async t => {
	const r = await rig(t);
	r.filter.setMode(Mode.DRAIN_SERVE);
	const response = await client(r.url('/'));
	t.is(response.body, 'app');
	t.is(response.headers['connection'], 'close');
	const ready = await client(r.url('/readyz'));
	t.is(ready.statusCode, 503);
	t.is(ready.body, 'draining\n');
	t.is((await client(r.url('/livez'))).statusCode, 200);
});

test('reject phase: 503 + Connection: close + Retry-After, on keep-alive and pipelined requests, app never called', async t => {
	const r = await rig(t);
	const connection = await RawConnection.open(r.port);
	t.is((await connection.request('/before')).status, 200);
	r.filter.setMode(Mode.REJECT);
	// Two pipelined requests in one write: the first is answered 503, then the connection closes.
	connection.socket.write('GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n');
	const response = await connection.readResponse();
	t.is(response.status, 503);
	t.is(response.headers['connection'], 'close');
	t.is(response.headers['retry-after'], '7');
	t.is(response.headers['content-type'], 'text/plain; charset=utf-8');
	t.regex(response.body, /shutting down/);
	t.is(await connection.closedByServer(), 'fin');
	t.deepEqual(r.seen, ['/before']);
	// Node parses the whole write at once, so /b became a request too, queued behind
	// /a's 503 with Connection: close: it is neither passed on nor answered.
	t.deepEqual(r.rejectedUrls, ['/a']);
	t.is(r.filter.rejected, 1);
});

test('a rejected upload gets its 503, not a reset: the body is read before the connection closes', async t => {
	const r = await rig(t);
	r.filter.setMode(Mode.REJECT);
	for (const size of [64 * 1024, 10 * 1024 * 1024]) {
		const response = await client.post(r.url('/upload'), {body: Buffer.alloc(size, 'x')});
		t.is(response.statusCode, 503, `${size} bytes`);
		t.is(response.headers['retry-after'], '7');
		t.regex(response.body, /shutting down/);
	}

	// An upload still being sent when the 503 arrives: the rest of it must be
	// accepted and the connection closed with a FIN, not reset under the client.
	const uploader = await RawConnection.open(r.port);
	const total = 8 * 1024 * 1024;
	uploader.socket.write(`POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: ${total}\r\n\r\n`);
	uploader.socket.write(Buffer.alloc(1024 * 1024, 'a'));
	const early = await uploader.readResponse();
	t.is(early.status, 503);
	// Counted as rejected once written, while the body is still coming (a client
	// that stalls mid-upload would otherwise never be counted).
	await waitUntil(() => r.filter.rejected === 3, {timeout: 2000, what: `the 503 to the uploader counted (rejected ${r.filter.rejected})`});
	uploader.socket.write(Buffer.alloc(total - 1024 * 1024, 'b'));
	t.is(await uploader.closedByServer(), 'fin');

	// Chunked, no Content-Length.
	const chunked = await client.post(r.url('/upload'), {body: Readable.from([Buffer.alloc(1024 * 1024, 'y'), Buffer.alloc(1024 * 1024, 'z')])});
	t.is(chunked.statusCode, 503);
	t.deepEqual(r.seen, []);
});

/** Resolves once the app has seen `count` requests. */
async function seenAtLeast(r: Rig, count: number): Promise<void> {
	if (r.seen.length < count) {
		await pEvent(r.server, 'request', {filter: () => r.seen.length >= count, timeout: 5000});
	}
}

const modeName = (mode: Mode): string => Object.keys(Mode).find(name => Mode[name as keyof typeof Mode] === mode)!;
const pipeline = (...paths: string[]) => paths.map(path => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`).join('');

for (const mode of [Mode.DRAIN_SERVE, Mode.REJECT, Mode.RETIRE]) {
	test(`drain start (${modeName(mode)}): pipelined responses in flight all reach the client, only the last carries Connection: close`, async t => {
		const r = await rig(t);
		const connection = await RawConnection.open(r.port);
		connection.socket.write(pipeline('/hold-1', '/hold-2', '/hold-3'));
		await seenAtLeast(r, 3);
		t.is(r.filter.inflight, 3);
		r.filter.setMode(mode);
		// Finished out of order: Node still writes them in arrival order.
		r.release('/hold-3');
		r.release('/hold-1');
		r.release('/hold-2');
		const responses = [await connection.readResponse(), await connection.readResponse(), await connection.readResponse()];
		t.deepEqual(responses.map(response => response.status), [200, 200, 200]);
		t.deepEqual(responses.map(response => response.headers['connection']), ['keep-alive', 'keep-alive', 'close']);
		t.is(await connection.closedByServer(), 'fin');
		await r.idle;
		t.is(r.filter.inflight, 0);
		t.is(r.filter.served, 3, 'served counts what the client received');
		t.is(r.idleCalls, 1);
	});
}

test('a pipelined response the app finished early, queued behind one in flight at the drain, is delivered', async t => {
	const r = await rig(t);
	const connection = await RawConnection.open(r.port);
	const held = r.held();
	connection.socket.write(pipeline('/hold-first', '/second'));
	await held;
	await seenAtLeast(r, 2);
	t.is(r.filter.inflight, 2, 'both reached the app; the second response waits behind the first');
	r.filter.setMode(Mode.DRAIN_SERVE);
	r.release('/hold-first');
	const first = await connection.readResponse();
	t.not(first.headers['connection'], 'close', 'not the last: a close here would drop the second');
	const second = await connection.readResponse();
	t.is(second.body, 'app');
	await r.idle;
	t.is(r.filter.inflight, 0);
	t.is(r.filter.served, 2);
	t.is(r.idleCalls, 1);
	// Its headers went out before the drain: the connection stays open, idle,
	// until the drain's closing phase closes idle connections.
	t.is((await connection.request('/after')).headers['connection'], 'close');
	t.deepEqual(r.seen, ['/hold-first', '/second', '/after']);
});

for (const mode of [Mode.DRAIN_SERVE, Mode.REJECT, Mode.RETIRE]) {
	test(`during a drain (${modeName(mode)}), requests pipelined behind the connection's last response never reach the app and get no response`, async t => {
		const r = await rig(t);
		r.filter.setMode(mode);
		const connection = await RawConnection.open(r.port);
		connection.socket.write(pipeline('/a', '/b', '/livez') + 'POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello');
		const response = await connection.readResponse();
		t.is(response.status, mode === Mode.REJECT ? 503 : 200);
		t.is(response.headers['connection'], 'close');
		t.is(await connection.closedByServer(), 'fin', 'nothing half-answered: a clean close the client can retry after');
		t.deepEqual(r.seen, mode === Mode.REJECT ? [] : ['/a']);
		t.is(r.filter.rejected, mode === Mode.REJECT ? 1 : 0);
	});
}

for (const mode of [Mode.DRAIN_SERVE, Mode.REJECT]) {
	test(`drain start (${modeName(mode)}): a last response whose headers are sent keeps them; the close goes on the request that arrives behind it`, async t => {
		const r = await rig(t);
		const connection = await RawConnection.open(r.port);
		connection.socket.write(pipeline('/hold-1', '/hold-2'));
		await seenAtLeast(r, 2);
		r.response('/hold-2').writeHead(200, {'Content-Length': String('released'.length)});
		r.filter.setMode(mode);
		connection.socket.write(pipeline('/next', '/dropped'));
		r.release('/hold-1');
		r.release('/hold-2');
		const responses = [await connection.readResponse(), await connection.readResponse(), await connection.readResponse()];
		t.deepEqual(responses.map(response => [response.status, response.headers['connection']]), [
			[200, 'keep-alive'],
			[200, 'keep-alive'],
			[mode === Mode.REJECT ? 503 : 200, 'close'],
		]);
		t.is(await connection.closedByServer(), 'fin');
		t.deepEqual(r.seen, mode === Mode.REJECT ? ['/hold-1', '/hold-2'] : ['/hold-1', '/hold-2', '/next']);
		await r.idle;
		t.is(r.filter.served, mode === Mode.REJECT ? 2 : 3);
		t.is(r.filter.inflight, 0);
	});
}

test('a client that pipelines and leaves does not leave requests counted in flight', async t => {
	const r = await rig(t);
	const connection = await RawConnection.open(r.port);
	const held = r.held();
	connection.socket.write('GET /hold-a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n');
	await held;
	const closed = once(r.response('/hold-a'), 'close');
	connection.close();
	await closed;
	t.is(r.filter.inflight, 0);
});

test('listeners the app adds after attach are filtered too; detach restores the server', async t => {
	const r = await rig(t);
	const late: string[] = [];
	r.server.on('request', (request: IncomingMessage) => late.push(request.url!));
	r.filter.setMode(Mode.REJECT);
	t.is((await client(r.url('/x'))).statusCode, 503);
	t.deepEqual(late, []);
	r.filter.uninstall();
	t.is((await client(r.url('/y'))).statusCode, 200);
	t.deepEqual(late, ['/y']);
});

test('an empty probe path sends the probe to the app', async t => {
	const server = http.createServer((_request, response) => response.end('app'));
	const filter = new RequestFilter(server, {retryAfterSeconds: 1, readinessPath: '', livenessPath: '/livez', onIdle() {}});
	await once(server.listen(0, '127.0.0.1'), 'listening');
	t.teardown(() => server.close());
	const {port} = server.address() as AddressInfo;
	t.is((await client(url(port, '/readyz'))).body, 'app');
	t.is(filter.inflight, 0);
});

test('readiness checks (setReadiness): run by the readiness probe while serving, 503 naming the failing one; during a drain 503 at once, without them', async t => {
	const server = http.createServer((_request, response) => response.end('app'));
	const db = switchableCheck();
	const filter = new RequestFilter(server, {retryAfterSeconds: 1, readinessPath: '/readyz', livenessPath: '/livez', onIdle() {}});
	filter.setReadiness(db.readiness);
	await once(server.listen(0, '127.0.0.1'), 'listening');
	t.teardown(() => {
		server.closeAllConnections();
		server.close();
	});
	const {port} = server.address() as AddressInfo;
	t.like(await client(url(port, '/readyz')), {statusCode: 200, body: 'ready\n'});
	db.ok = false;
	t.like(await client(url(port, '/readyz')), {statusCode: 503, body: 'db: not ready\n'});
	t.like(await client(url(port, '/livez')), {statusCode: 200});
	t.is(db.runs, 2);
	filter.setMode(Mode.DRAIN_SERVE);
	const draining = await client(url(port, '/readyz'));
	t.like(draining, {statusCode: 503, body: 'draining\n'});
	t.is(draining.headers.connection, 'close');
	t.is(db.runs, 2);
	t.is(filter.requests, 0, 'probes are not requests');
});

// ---------------------------------------------------------------------------
// Long-lived connections and requests that never become 'request' events.


/** A client that has sent the handshake and read the server's first answer (the 101). */
async function upgradedClient(port: number): Promise<{socket: net.Socket; answer: string}> {
	const socket = net.connect(port, '127.0.0.1');
	socket.on('error', () => {});
	socket.write(UPGRADE);
	const [answer] = await once(socket, 'data') as [Buffer];
	return {socket, answer: answer.toString('latin1')};
}

/** An app 'upgrade' listener that answers 101 and keeps the socket (what ws does, minus the framing). */
function acceptUpgrades(r: Rig): Array<{request: IncomingMessage; socket: net.Socket}> {
	const upgraded: Array<{request: IncomingMessage; socket: net.Socket}> = [];
	r.server.on('upgrade', (request: IncomingMessage, socket: net.Socket) => {
		upgraded.push({request, socket});
		socket.on('error', () => {});
		// Its client closed: so does the app's side (the server's sockets are half-open).
		socket.on('end', () => socket.end());
		socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
	});
	return upgraded;
}

test('upgrades: served and counted apart while serving and in the serve phase; the drain 503 in the reject phase, the app never sees it', async t => {
	const r = await rig(t);
	const upgraded = acceptUpgrades(r);
	const {socket: first} = await upgradedClient(r.port);
	t.is(r.filter.upgrades, 1);
	t.is(r.filter.inflight, 0, 'an upgraded socket is not a request in flight');

	r.filter.setMode(Mode.DRAIN_SERVE);
	const {socket: second, answer} = await upgradedClient(r.port);
	t.regex(answer, /^HTTP\/1\.1 101 /, 'the serve phase still upgrades');
	t.is(r.filter.upgrades, 2);

	r.filter.setMode(Mode.REJECT);
	const rejected = await rawExchange(r.port, UPGRADE);
	t.true(rejected.closed, 'the socket closes after the 503');
	t.regex(rejected.received, /^HTTP\/1\.1 503 Service Unavailable\r\n/);
	t.regex(rejected.received, /\r\nConnection: close\r\n/);
	t.regex(rejected.received, /\r\nRetry-After: 7\r\n/);
	t.regex(rejected.received, /shutting down/);
	t.is(upgraded.length, 2, 'the app\'s upgrade listener never saw the rejected one');
	t.deepEqual(r.rejectedUrls, ['/ws']);

	// Closing: a WebSocket close frame (1001 for a shutdown), then the app and the client close it.
	const frame = once(first, 'data');
	t.deepEqual(r.filter.closeLongLived('shutdown'), {upgrades: 2, streams: 0});
	const [bytes] = await frame as [Buffer];
	t.is(bytes[0], 0x88, 'FIN + close opcode');
	t.is(bytes.readUInt16BE(2), 1001);
	t.is(bytes.subarray(4).toString(), 'server shutting down');
	const closed = Promise.all(upgraded.map(async ({socket}) => new Promise(resolve => {
		socket.once('close', resolve);
	})));
	first.destroy();
	second.destroy();
	await closed;
	t.is(r.filter.upgrades, 0, 'a closed upgraded socket is forgotten');
});

test('an upgraded socket nobody closes after the close frame stays open until cutLongLived(), which destroys it and takes it off the count at once, not at its close; a reload sends 1012', async t => {
	const r = await rig(t);
	const upgraded = acceptUpgrades(r);
	const {socket} = await upgradedClient(r.port);
	r.filter.setMode(Mode.RETIRE);
	const frame = once(socket, 'data');
	t.deepEqual(r.filter.closeLongLived('reload'), {upgrades: 1, streams: 0});
	t.is(((await frame)[0] as Buffer).readUInt16BE(2), 1012);
	t.is(r.filter.upgrades, 1, 'nobody answered: still open, and no timer of the filter\'s own destroys it');
	const closed = once(upgraded[0]!.socket, 'close');
	t.deepEqual(r.filter.cutLongLived(), {upgrades: 1, streams: 0});
	t.is(r.filter.upgrades, 0, 'off the count before its close comes');
	await closed;
	t.deepEqual(r.filter.cutLongLived(), {upgrades: 0, streams: 0}, 'cut once');
});

test('Expect: 100-continue: Node\'s default while serving; in the reject phase the 503 is the final answer, no 100 first', async t => {
	const r = await rig(t);
	const request = (path: string) => `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n`;
	const sendBodyOn100 = (socket: net.Socket, received: () => string) => {
		socket.on('data', () => {
			if (received().startsWith('HTTP/1.1 100 Continue\r\n\r\n') && !socket.writableEnded) {
				socket.end('hello');
			}
		});
	};

	const served = await rawExchange(r.port, request('/serving'), {after: sendBodyOn100, ms: 1000});
	t.regex(served.received, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
	t.deepEqual(r.seen, ['/serving']);

	r.filter.setMode(Mode.REJECT);
	const rejected = await rawExchange(r.port, request('/rejected'));
	t.regex(rejected.received, /^HTTP\/1\.1 503 Service Unavailable\r\n/, 'no 100 Continue before it');
	t.regex(rejected.received, /\r\nConnection: close\r\n/);
	t.regex(rejected.received, /\r\nRetry-After: 7\r\n/);
	t.true(rejected.closed, 'the connection closes after the 503');
	t.deepEqual(r.seen, ['/serving']);

	// The app's own 'checkContinue' listener: it decides while serving, never sees a rejected one.
	const continued: string[] = [];
	r.server.on('checkContinue', (incoming: IncomingMessage, response: ServerResponse) => {
		continued.push(incoming.url!);
		response.writeHead(417).end();
	});
	t.regex((await rawExchange(r.port, request('/app-rejected'))).received, /^HTTP\/1\.1 503 /);
	r.filter.setMode(Mode.SERVING);
	t.regex((await rawExchange(r.port, request('/app-own'), {ms: 1000})).received, /^HTTP\/1\.1 417 /);
	t.deepEqual(continued, ['/app-own']);
	t.is(r.filter.inflight, 0);
	r.filter.uninstall();
	t.is(r.server.listenerCount('checkContinue'), 1, 'uninstall takes our listener off');
});

test('event streams: a new one in the reject phase gets 200 + retry: and an end, never a 503; open ones are sorted out of inflight and ended', async t => {
	const r = await rig(t);
	r.server.removeAllListeners('request');
	const streams: ServerResponse[] = [];
	const events = new EventEmitter();
	r.server.on('request', (request: IncomingMessage, response: ServerResponse) => {
		if (request.url === '/events-head') {
			// Headers straight through writeHead: Node does not store them.
			response.writeHead(200, {'Content-Type': 'text/event-stream'});
		} else {
			response.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
			response.flushHeaders();
		}

		response.write('data: hello\n\n');
		streams.push(response);
		events.emit('stream');
	});
	// Held open until the chunked stream's end arrives (or 20 s, a failure).
	const ended = (received: string) => received.endsWith('\r\n0\r\n\r\n');
	const twoStreams = pEvent(events, 'stream', {filter: () => streams.length === 2, timeout: 10_000});
	const open = [rawExchange(r.port, 'GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n', {ms: 20_000, until: ended}), rawExchange(r.port, 'GET /events-head HTTP/1.1\r\nHost: x\r\n\r\n', {ms: 20_000, until: ended})];
	await twoStreams;

	t.is(r.filter.inflight, 2, 'while serving, nothing is sorted: no per-request cost');
	r.filter.setMode(Mode.REJECT);
	r.filter.sortLongLived();
	t.is(r.filter.inflight, 0);
	t.is(r.filter.streams, 2);

	const fresh = await client(r.url('/events'), {headers: {accept: 'text/event-stream'}});
	t.is(fresh.statusCode, 200);
	t.is(fresh.headers['content-type'], 'text/event-stream');
	t.is(fresh.headers['connection'], 'close');
	t.is(fresh.body, 'retry: 7000\n\n');
	t.is(r.filter.rejected, 1);

	t.deepEqual(r.filter.closeLongLived('shutdown'), {upgrades: 0, streams: 2});
	for (const exchange of await Promise.all(open)) {
		t.regex(exchange.received, /data: hello\n\n\r\n0\r\n\r\n$/, 'the chunked stream ended cleanly');
	}

	t.is(r.filter.streams, 0);
});

test('an event stream still open when the wait for its end is over is cut by cutLongLived: off the count at once, once; its connection closes', async t => {
	const r = await rig(t);
	r.server.removeAllListeners('request');
	r.server.on('request', (_request: IncomingMessage, response: ServerResponse) => {
		response.writeHead(200, {'Content-Type': 'text/event-stream'});
		response.write('data: hello\n\n');
	});
	const open = rawExchange(r.port, 'GET /events HTTP/1.1\r\nHost: x\r\n\r\n', {ms: 20_000});
	await pEvent(r.server, 'request');
	r.filter.setMode(Mode.REJECT);
	r.filter.sortLongLived();
	t.is(r.filter.streams, 1);
	t.deepEqual(r.filter.cutLongLived(), {upgrades: 0, streams: 1});
	t.is(r.filter.streams, 0, 'off the count before its close comes');
	const {received, closed} = await open;
	t.true(closed, 'the connection closes');
	t.notRegex(received, /\r\n0\r\n\r\n$/, 'cut: no chunked end');
	t.deepEqual(r.filter.cutLongLived(), {upgrades: 0, streams: 0}, 'cut once');
});

test('retiring (a reload): on kept-alive connections, an ordinary request is served with Connection: close; an event stream gets 200 + retry: 250 and an end, a WebSocket handshake 503 + Retry-After: 0, neither reaching the app; readiness stays 200', async t => {
	const r = await rig(t);
	const upgraded = acceptUpgrades(r);
	// Kept alive before the reload, as a client about to reuse one has it.
	const connections = await Promise.all([0, 1, 2, 3].map(async () => RawConnection.open(r.port)));
	for (const connection of connections) {
		t.is((await connection.request('/before')).headers['connection'], 'keep-alive');
	}

	r.filter.setMode(Mode.RETIRE);
	r.filter.stopAccepting(true);
	const [plain, events, upgrade, probe] = connections as [RawConnection, RawConnection, RawConnection, RawConnection];

	const served = await plain.request('/plain');
	t.is(served.body, 'app');
	t.is(served.headers['connection'], 'close');
	t.is(await plain.closedByServer(), 'fin');

	events.socket.write('GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n');
	const stream = await events.readResponse();
	t.is(stream.status, 200);
	t.is(stream.headers['content-type'], 'text/event-stream');
	t.is(stream.headers['connection'], 'close');
	t.is(stream.headers['cache-control'], 'no-store');
	t.is(stream.body, 'retry: 250\n\n');
	t.is(await events.closedByServer(), 'fin', 'ended at once, not at the linger\'s end');

	upgrade.socket.write(UPGRADE);
	const handshake = await upgrade.readResponse();
	t.is(handshake.status, 503);
	t.is(handshake.headers['retry-after'], '0');
	t.is(handshake.headers['connection'], 'close');
	t.regex(handshake.body, /being replaced/);
	t.is(await upgrade.closedByServer(), 'fin');
	t.is(upgraded.length, 0, 'the app\'s upgrade listener never saw it');
	t.is(r.filter.upgrades, 0);

	const ready = await probe.request('/readyz');
	t.is(ready.status, 200);
	t.is(ready.body, 'ready\n');

	t.deepEqual(r.seen, ['/before', '/before', '/before', '/before', '/plain']);
	t.is(r.filter.redirected, 2);
	t.is(r.filter.rejected, 0, 'sent to another worker, not refused');
	t.deepEqual(r.rejectedUrls, []);
	t.is(r.filter.requests, 5, 'what the app saw');
});

test('attach() takes node:http and node:https servers, and throws a TypeError at the call for anything else', async t => {
	const {attach} = await import('../../src/worker/index.js');
	const {drainableKind} = await import('../../src/worker/filter.js');
	t.is(drainableKind(http.createServer()), 'http1');
	t.is(drainableKind(https.createServer()), 'http1');
	for (const [value, name] of [[net.createServer(), 'a net.Server'], [{emit() {}, close() {}}, 'an object \\(Object\\)'], [undefined, 'undefined'], [null, 'null']] as const) {
		t.is(drainableKind(value), undefined);
		t.throws(() => attach(value as unknown as http.Server), {instanceOf: TypeError, message: new RegExp(`takes a server made by http.createServer\\(\\).*it got ${name}`)});
	}
});

test('listening stops without cutting a response still being written to a slow client; it stays in flight until its last byte is out', async t => {
	const r = await rig(t);
	const size = 16 * 1024 * 1024;
	const socket = net.connect(r.port, '127.0.0.1');
	t.teardown(() => socket.destroy());
	const held = r.held();
	socket.write('GET /hold-big HTTP/1.1\r\nHost: x\r\n\r\n');
	await held;
	const response = r.response('/hold-big');
	response.end(Buffer.alloc(size, 120));
	// A slow reader: a pause after every chunk, so the body waits in the server's buffers.
	let received = 0;
	socket.on('data', chunk => {
		received += chunk.length;
		socket.pause();
		setTimeout(() => socket.resume(), 5);
	});
	t.false(response.writableFinished, 'the body is still on its way');
	r.filter.setMode(Mode.REJECT);
	r.filter.stopAccepting(false);
	t.false(r.server.listening);
	t.is(r.filter.inflight, 1, 'in flight until written out');
	await r.idle;
	t.true(response.writableFinished, 'idle only once the last byte was handed to the socket');
	r.filter.closeConnections();
	await once(socket, 'close');
	t.true(received > size, `the whole body arrived: ${received} bytes`);
	t.is(r.filter.served, 1);
});

test('server.close(callback) after the drain closed the server: the callback without an error, once closed (stoppable, terminus, http-terminator)', async t => {
	const r = await rig(t);
	const connection = await RawConnection.open(r.port);
	const held = r.held();
	const pending = connection.request('/hold-1');
	await held;
	r.filter.setMode(Mode.REJECT);
	r.filter.stopAccepting(false);
	const order: string[] = [];
	const closedAgain = new Promise<unknown>(resolve => {
		r.server.close(error => {
			order.push('callback');
			resolve(error);
		});
	});
	r.server.closeIdleConnections();
	await nextTick();
	t.deepEqual(order, [], 'not before the server has closed: a connection is still open');
	r.release('/hold-1');
	t.is((await pending).status, 200);
	await r.idle;
	r.filter.closeConnections();
	r.server.closeAllConnections();
	t.is(await closedAgain, undefined, 'no ERR_SERVER_NOT_RUNNING');
	t.is(await new Promise(resolve => {
		r.server.close(resolve);
	}), undefined, 'and again, once closed');
	r.filter.uninstall();
	t.false(Object.hasOwn(r.server, 'close'), 'detach restores the prototype\'s close');
});

test('a server the app closed before the drain is left to Node\'s own close', async t => {
	const r = await rig(t);
	await new Promise(resolve => {
		r.server.close(resolve);
	});
	r.filter.setMode(Mode.REJECT);
	r.filter.stopAccepting(false);
	const error = await new Promise(resolve => {
		r.server.close(resolve);
	});
	t.is((error as NodeJS.ErrnoException | undefined)?.code, 'ERR_SERVER_NOT_RUNNING', 'the app closed it twice itself');
});

test('a server that had not listened when the drain stopped accepting: the app\'s close(callback) gets no error, and a listen that comes later is closed at once', async t => {
	const late: unknown[] = [];
	const server = http.createServer((_request, response) => {
		response.end('app');
	});
	const filter = new RequestFilter(server, {retryAfterSeconds: 1, readinessPath: '/readyz', livenessPath: '/livez', onIdle() {}, onLateListen: address => late.push(address)});
	t.teardown(() => {
		server.close();
	});
	filter.setMode(Mode.REJECT);
	filter.stopAccepting(false);
	const error = await new Promise(resolve => {
		server.close(resolve);
	});
	t.is(error, undefined, 'not ERR_SERVER_NOT_RUNNING: closing it is the drain\'s job');
	const closed = once(server, 'close');
	server.listen(0, '127.0.0.1');
	await closed;
	t.false(server.listening);
	const {port} = late[0] as AddressInfo;
	t.true(port > 0);
	await t.throwsAsync(once(net.connect(port, '127.0.0.1'), 'connect'), {code: 'ECONNREFUSED'});
});

test('an event stream the drain ends while the app still writes to it: the late write is not an uncaught error; any other error still is', async t => {
	// What a timer-driven SSE handler does until 'close', which a client that stopped reading delays past our end().
	const stream = new Writable({
		write(_chunk, _encoding, done) {
			done();
		},
	});
	endOwnedStream(stream);
	stream.write('data: late\n\n');
	// No listener of the test's own: without the guard, the write-after-end error fails this test as uncaught.
	await pEvent(stream, 'close', {rejectionEvents: []});
	t.is((stream.errored as (Error & {code?: string}) | null)?.code, 'ERR_STREAM_WRITE_AFTER_END');
	const other = new Writable({write(_chunk, _encoding, done) {
		done();
	}});
	endOwnedStream(other);
	t.throws(() => other.emit('error', new Error('the socket broke')), {message: 'the socket broke'});
});

test('closeConnections: a FIN to each connection left, which closes when its client closes its side; one whose client never does is destroyed after the linger; closingConnections counts them, onIdle once the last has closed', async t => {
	const r = await rig(t, {lingerMs: 300});
	// One client keeps its side open after our FIN (allowHalfOpen); the other closes at once, as HTTP clients do.
	const stubborn = net.connect({port: r.port, host: '127.0.0.1', allowHalfOpen: true});
	const polite = net.connect({port: r.port, host: '127.0.0.1'});
	t.teardown(() => {
		stubborn.destroy();
		polite.destroy();
	});
	await Promise.all([once(stubborn, 'connect'), once(polite, 'connect')]);
	for (const socket of [stubborn, polite]) {
		socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
	}

	// Both idle keep-alive connections after their response.
	await Promise.all([once(stubborn, 'data'), once(polite, 'data')]);
	r.filter.setMode(Mode.REJECT);
	const startedAt = performance.now();
	r.filter.closeConnections();
	t.is(r.filter.closingConnections, 2);
	await Promise.all([once(stubborn, 'end'), once(polite, 'close')]);
	// The polite one closes as soon as its FIN is read; the stubborn one lingers.
	await waitUntil(() => r.filter.closingConnections === 1, {timeout: 250, what: 'the polite connection closed on the server'});
	// A request on the lingering connection is read and dropped, never handed to the app.
	stubborn.write('GET /late HTTP/1.1\r\nHost: x\r\n\r\n');
	await r.idle;
	const elapsed = performance.now() - startedAt;
	t.true(elapsed >= 250 && elapsed < 1500, `closed after ${Math.round(elapsed)} ms`);
	t.is(r.filter.closingConnections, 0);
	t.is(r.idleCalls, 1);
	t.false(r.seen.includes('/late'));
});

test('closeConnections: a client still sending after our FIN (an upload the app never read) keeps its connection until it has been quiet for the linger, within the longest linger', async t => {
	const r = await rig(t, {lingerMs: 10_000});
	const uploader = net.connect({port: r.port, host: '127.0.0.1', allowHalfOpen: true});
	t.teardown(() => {
		uploader.destroy();
	});
	await once(uploader, 'connect');
	uploader.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
	await once(uploader, 'data');
	let error: Error | undefined;
	uploader.on('error', caught => {
		error = caught;
	});
	r.filter.setMode(Mode.REJECT);
	const startedAt = performance.now();
	r.filter.closeConnections();
	await once(uploader, 'end');
	// 2.5 s of bytes that are not HTTP, then silence.
	const sending = setInterval(() => uploader.write('x'.repeat(1000)), 100);
	await new Promise(resolve => {
		setTimeout(resolve, 2500);
	});
	clearInterval(sending);
	const stoppedAt = performance.now();
	t.is(r.filter.closingConnections, 1, 'still open while the client sent');
	t.is(error, undefined, 'no reset while it sent');
	await r.idle;
	// Checked once a window (LINGER_MS, 2 s): quiet for one whole window, so 2-4 s after it stopped.
	const closedAfter = performance.now() - stoppedAt;
	t.true(closedAfter >= 1500 && closedAfter < 4500, `closed ${Math.round(closedAfter)} ms after the client stopped sending (${Math.round(performance.now() - startedAt)} ms in all)`);
});
