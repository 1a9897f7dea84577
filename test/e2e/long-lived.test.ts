// Long-lived connections through a drain, with real clients: ws (server and
// client), socket.io 4 on the websocket transport, EventSource (eventsource 4),
// raw sockets for upgrades and Expect: 100-continue. The app is
// test/fixtures/long-lived.mjs, with and without handle.onDrain().
import test from 'ava';
import {once} from 'node:events';
import {performance} from 'node:perf_hooks';
import {UPGRADE_CLOSE_WAIT_MS} from '../../src/worker/long-lived.js';
import {url} from '../../testkit/net.js';
import {ABNORMAL_CLOSE, HandshakeRejected, openEventSource, openSocketIo, openWs} from '../../testkit/long-lived.js';
import {eventually} from '../../testkit/proc.js';
import {fixture, startCluster, type LogLine} from '../helpers/cluster.js';
import {client, rawExchange, RawConnection, UPGRADE_REQUEST} from '../helpers/http.js';

const REJECT_MS = 2000;
const APP = fixture('long-lived.mjs');

const isWorker = (message: string) => (line: LogLine) => line.role === 'worker' && line.msg === message;

/** Until what the clients recorded shows `condition`, at most 10 s; the assertions after it say what was there if it never did. */
const clientsSaw = async (condition: () => boolean): Promise<boolean> => eventually(condition, {timeout: 10_000, interval: 20});

test.serial('left to graceful-cluster: new upgrades, 100-continue and event streams are turned away in the reject phase; open WebSockets get 1001 and streams end when it ends; hooks run, exit 0', async t => {
	t.timeout(60_000);
	const app = await startCluster(t, ['--reject-period', `${REJECT_MS}ms`, '--grace-period', '20s'], APP, {workers: 1});
	const sockets = [openWs(`ws://127.0.0.1:${app.port}/ws`), openWs(`ws://127.0.0.1:${app.port}/ws`)];
	await Promise.all(sockets.map(async socket => socket.opened));
	t.is(await sockets[0]!.echo('hi'), 'hi');
	const socketIo = openSocketIo(`http://127.0.0.1:${app.port}`);
	await socketIo.connected;
	t.is(await socketIo.socket.timeout(2000).emitWithAck('echo', 'ping'), 'ping');
	const events = openEventSource(url(app.port, '/events'));
	await events.opened;
	// An ordinary request that outlasts the reject phase: it still finishes.
	const slow = client(url(app.port, `/slow?ms=${REJECT_MS + 1500}`));
	await app.waitForLog('fixture request started');

	const signalledAt = performance.now();
	app.kill('SIGTERM');
	await app.waitForLog(isWorker('rejecting new requests'));

	// New work of every kind, turned away before the app sees it.
	const late = openWs(`ws://127.0.0.1:${app.port}/ws`);
	const refused = await late.opened.then(() => undefined, (error: unknown) => error);
	t.true(refused instanceof HandshakeRejected, String(refused));
	const handshake = refused as HandshakeRejected;
	t.is(handshake.status, 503);
	t.is(handshake.headers['connection'], 'close');
	t.is(handshake.headers['retry-after'], '1');
	const {received: upgrade} = await rawExchange(app.port, UPGRADE_REQUEST, {ms: 5000});
	t.regex(upgrade, /^HTTP\/1\.1 503 Service Unavailable\r\n[^]*Connection: close\r\n[^]*Retry-After: 1\r\n/);
	const {received: upload} = await rawExchange(app.port, 'POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n', {ms: 5000});
	t.regex(upload, /^HTTP\/1\.1 503 Service Unavailable\r\n/, 'the 503 is the first and final answer: no 100 Continue');
	t.notRegex(upload, /100 Continue/);
	const stream = await client(url(app.port, '/events'), {headers: {accept: 'text/event-stream'}});
	t.is(stream.statusCode, 200, 'never a 503 for an event stream: EventSource would give up for good');
	t.is(stream.headers['content-type'], 'text/event-stream');
	t.is(stream.body, 'retry: 1000\n\n');
	t.is(app.lines.filter(line => line.msg === 'fixture ws opened').length, 2, 'the app never saw the rejected upgrades');

	// The open ones still work during the reject phase, and are reported apart.
	t.is(await sockets[1]!.echo('still here'), 'still here');
	const progress = await app.waitForLog(line => line.role === 'primary' && line.msg === 'drain progress');
	t.like(progress, {inflight: 1, upgrades: 3, streams: 1});

	// The reject phase ends: graceful-cluster closes what the app left open.
	const closes = await Promise.all(sockets.map(async socket => socket.closed));
	for (const close of closes) {
		t.is(close.code, 1001);
		t.is(close.reason, 'server shutting down');
		const afterSignal = close.at - signalledAt;
		t.true(afterSignal > REJECT_MS - 300 && afterSignal < REJECT_MS + 1500, `closed ${Math.round(afterSignal)} ms after SIGTERM`);
	}

	// socket.io and EventSource notice the end of their connections in their own time.
	await clientsSaw(() => socketIo.disconnects.length > 0 && events.errors.length > 0);
	t.deepEqual(socketIo.disconnects.map(disconnect => disconnect.reason), ['transport close'], 'socket.io sees a transport close, so it reconnects');
	t.true(events.errors.length > 0, 'the stream ended');
	t.not(events.source.readyState, events.source.CLOSED, 'EventSource is reconnecting, not failed');
	const closedLine = await app.waitForLog(isWorker('closed the long-lived connections still open; the app can close them itself, earlier, in handle.onDrain()'));
	t.like(closedLine, {upgrades: 3, streams: 1, reason: 'shutdown', closeCode: 1001});

	// The request in flight finishes; the drain is clean.
	t.is((await slow).body, 'slow done');
	const exit = await app.exited;
	const exitMs = performance.now() - signalledAt;
	socketIo.socket.disconnect();
	events.source.close();
	t.is(exit.code, 0, app.text());
	t.true(exitMs < REJECT_MS + 1500 + 2000, `exit ${Math.round(exitMs)} ms after SIGTERM, soon after the slow request`);
	t.log(`exit code 0, ${Math.round(exitMs)} ms after SIGTERM (reject phase ${REJECT_MS} ms, slow request ${REJECT_MS + 1500} ms)`);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0, closedLongLived: 4});
	t.like(app.lines.find(line => line.msg === 'fixture shutdown hook'), {upgrades: 0});
	t.deepEqual(app.lines.filter(line => line.level === 'error' || line.level === 'fatal'), []);
});

test.serial('WebSockets whose client never answers the close frame are destroyed UPGRADE_CLOSE_WAIT_MS later, each counted once in longLivedCut; one that answers is closed cleanly, not cut', async t => {
	t.timeout(40_000);
	const app = await startCluster(t, ['--reject-period', '1s', '--grace-period', '15s'], APP, {workers: 1});
	const answering = openWs(`ws://127.0.0.1:${app.port}/ws`);
	await answering.opened;
	// The handshake by hand, then silence: these clients never send a frame, the close frame's answer included.
	const silent = await Promise.all([0, 1, 2].map(async () => {
		const connection = await RawConnection.open(app.port);
		t.teardown(() => {
			connection.close();
		});
		connection.socket.write(UPGRADE_REQUEST);
		t.is((await connection.readResponse()).status, 101);
		return connection;
	}));
	await app.waitForLog('fixture ws opened', {count: 4});
	// When each one's close frame came, and when the server closed it.
	const ends = silent.map(async ({socket}) => {
		const [frame] = await once(socket, 'data') as [string];
		const frameAt = performance.now();
		await once(socket, 'close');
		return {frame: Buffer.from(frame, 'latin1'), waitedMs: performance.now() - frameAt};
	});

	app.kill('SIGTERM');
	t.like(await answering.closed, {code: 1001, reason: 'server shutting down'});
	for (const {frame, waitedMs} of await Promise.all(ends)) {
		t.is(frame[0], 0x88, 'a close frame');
		t.is(frame.readUInt16BE(2), 1001);
		t.true(waitedMs > UPGRADE_CLOSE_WAIT_MS - 300 && waitedMs < UPGRADE_CLOSE_WAIT_MS + 1500, `destroyed ${Math.round(waitedMs)} ms after its close frame`);
	}

	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(isWorker('long-lived connections did not finish closing in time; destroying them')), {upgrades: 3, streams: 0});
	t.like(app.lines.find(isWorker('worker drained')), {closedLongLived: 4, longLivedCut: 3});
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', closedLongLived: 4, longLivedCut: 3});
});

test.serial('with handle.onDrain(): the app closes its WebSockets (1001) and streams as the drain starts; socket.io and EventSource reconnect; nothing left for graceful-cluster; exit 0 after the reject phase', async t => {
	t.timeout(60_000);
	const app = await startCluster(t, ['--reject-period', `${REJECT_MS}ms`, '--grace-period', '20s'], APP, {workers: 1, env: {FIXTURE_ON_DRAIN: '1'}});
	const sockets = [openWs(`ws://127.0.0.1:${app.port}/ws`), openWs(`ws://127.0.0.1:${app.port}/ws`)];
	await Promise.all(sockets.map(async socket => socket.opened));
	const socketIo = openSocketIo(`http://127.0.0.1:${app.port}`);
	await socketIo.connected;
	const events = openEventSource(url(app.port, '/events'));
	await events.opened;

	const signalledAt = performance.now();
	app.kill('SIGTERM');
	const notice = await app.waitForLog('fixture onDrain');
	t.like(notice, {reason: 'shutdown', closeCode: 1001, upgrades: 3, streams: 1});
	t.true(Number(notice['closeInMs']) > REJECT_MS - 500 && Number(notice['closeInMs']) <= REJECT_MS, `closeInMs ${String(notice['closeInMs'])}`);
	for (const close of await Promise.all(sockets.map(async socket => socket.closed))) {
		t.is(close.code, 1001);
		t.is(close.reason, 'going away');
		t.true(close.at - signalledAt < 1000, 'closed by the app at once');
	}

	// socket.io's disconnect, and EventSource's reconnect after the app's retry: 500.
	await clientsSaw(() => socketIo.disconnects.length > 0 && events.opens >= 2);
	t.is(socketIo.disconnects[0]?.reason, 'transport close');
	t.not(events.source.readyState, events.source.CLOSED, 'EventSource reconnects (and is sent away with a retry: while rejecting)');
	t.true(events.opens >= 2, `EventSource reconnected ${events.opens - 1} times, each a 200 stream`);
	const exit = await app.exited;
	const exitMs = performance.now() - signalledAt;
	socketIo.socket.disconnect();
	events.source.close();
	t.is(exit.code, 0, app.text());
	t.true(exitMs < REJECT_MS + 1500, `exit ${Math.round(exitMs)} ms after SIGTERM`);
	t.log(`exit code 0, ${Math.round(exitMs)} ms after SIGTERM`);
	t.is(app.lines.filter(isWorker('closed the long-lived connections still open; the app can close them itself, earlier, in handle.onDrain()')).length, 0);
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0, closedLongLived: 0});
});

test.serial('serve phase: new WebSockets still reach the app; they are closed with 1001 when the reject phase ends', async t => {
	t.timeout(60_000);
	const app = await startCluster(t, ['--serve-period', '1500ms', '--reject-period', '1000ms', '--grace-period', '20s'], APP, {workers: 1});
	const signalledAt = performance.now();
	app.kill('SIGTERM');
	await app.waitForLog(isWorker('drain started'));
	const socket = openWs(`ws://127.0.0.1:${app.port}/ws`);
	await socket.opened;
	t.is(await socket.echo('serve phase'), 'serve phase');
	const close = await socket.closed;
	t.is(close.code, 1001);
	t.true(close.at - signalledAt > 2200, `closed ${Math.round(close.at - signalledAt)} ms after SIGTERM`);
	t.is((await app.exited).code, 0, app.text());
});

test.serial('reload (SIGHUP): the retiring worker\'s WebSockets get 1012 when its linger ends, with or without onDrain; new ones reach the new worker', async t => {
	t.timeout(60_000);
	for (const onDrain of ['0', '1']) {
		const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '20s'], APP, {workers: 1, env: {FIXTURE_ON_DRAIN: onDrain}});
		const old = openWs(`ws://127.0.0.1:${app.port}/ws`);
		await old.opened;
		app.kill('SIGHUP');
		const close = await old.closed;
		t.is(close.code, 1012, `onDrain ${onDrain}`);
		t.is(close.reason, onDrain === '1' ? 'restarting' : 'server restarting');
		await app.waitForLog('reload finished');
		const fresh = openWs(`ws://127.0.0.1:${app.port}/ws`);
		await fresh.opened;
		t.is(await fresh.echo('new worker'), 'new worker');
		t.not(close.code, ABNORMAL_CLOSE);
		app.kill('SIGTERM');
		t.is((await app.exited).code, 0, app.text());
		if (onDrain === '1') {
			t.like(app.lines.find(line => line.msg === 'fixture onDrain'), {reason: 'reload', closeCode: 1012});
		} else {
			t.like(app.lines.find(isWorker('closed the long-lived connections still open; the app can close them itself, earlier, in handle.onDrain()')), {upgrades: 1, reason: 'reload', closeCode: 1012});
		}
	}
});

test.serial('reload (SIGHUP): an event stream or a WebSocket handshake on a kept-alive connection of the retiring worker is sent elsewhere at once, not served to the linger\'s end; the next event stream reaches the new worker', async t => {
	t.timeout(30_000);
	const app = await startCluster(t, ['--reject-period', '500ms', '--grace-period', '10s'], APP, {workers: 1});
	const listening = app.lines.find(line => line.msg === 'worker listening')!;
	const oldPid = listening['workerPid'];
	// Kept alive before the reload, and sure to be the old worker's: it is the only one.
	const [events, upgrade] = await Promise.all([RawConnection.open(app.port), RawConnection.open(app.port)]) as [RawConnection, RawConnection];
	t.is((await events.request('/')).body, 'hello');
	t.is((await upgrade.request('/')).body, 'hello');

	app.kill('SIGHUP');
	const retiring = await app.waitForLog(line => line.msg === 'retiring: replaced by a new worker' && line.pid === oldPid);
	t.is(retiring['worker'], listening['worker']);
	const newPid = (await app.waitForLog('worker listening', {count: 2}))['workerPid'];
	t.not(newPid, oldPid);

	events.socket.write('GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n');
	const stream = await events.readResponse();
	t.is(stream.status, 200);
	t.is(stream.headers['content-type'], 'text/event-stream');
	t.is(stream.headers['connection'], 'close');
	t.is(stream.body, 'retry: 250\n\n', 'a short retry, no event: the app never served it');
	t.is(await events.closedByServer(), 'fin');

	upgrade.socket.write(UPGRADE_REQUEST);
	const handshake = await upgrade.readResponse();
	t.is(handshake.status, 503);
	t.is(handshake.headers['retry-after'], '0');
	t.is(handshake.headers['connection'], 'close');
	t.is(await upgrade.closedByServer(), 'fin');
	const answeredAt = app.lines.length;

	// EventSource's reconnect: a new connection, which only the new worker takes.
	const fresh = await rawExchange(app.port, 'GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n', {ms: 10_000, until: received => received.includes('data: tick 0')});
	t.regex(fresh.received, /^HTTP\/1\.1 200 OK\r\n[^]*data: tick 0\n\n/);
	await app.waitForLog(line => line.msg === 'fixture stream opened' && line.pid === newPid);

	const exited = await app.waitForLog(line => line.msg === 'worker exited' && line['workerPid'] === oldPid);
	t.true(app.lines.indexOf(exited) >= answeredAt, 'both were answered before the retiring worker left');
	t.false(app.lines.some(line => (line.msg === 'fixture stream opened' || line.msg === 'fixture ws opened') && line.pid === oldPid), 'the old worker\'s app saw neither');
	t.like(app.lines.find(line => line.msg === 'worker drained' && line.pid === oldPid), {rejected: 0, redirected: 2}, 'sent elsewhere, not refused');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

const POLLING_WARNING = 'socket.io long-polling under several workers: a client\'s polls land on other workers, which do not know its session. Set transports: [\'websocket\'] on the server and the client, or run one worker per process behind sticky sessions';

test.serial('socket.io\'s long-polling transport under -w 2: one warning for the cluster, saying what to do; none under -w 1', async t => {
	const poll = '/socket.io/?EIO=4&transport=polling';
	const two = await startCluster(t, ['--reject-period', '300ms'], APP, {workers: 2});
	// Each on a new connection: the round-robin spreads them over both workers.
	for (let i = 0; i < 6; i++) {
		await client(url(two.port, poll), {agent: {}, headers: {connection: 'close'}});
	}

	await two.waitForLog(POLLING_WARNING);
	two.kill('SIGTERM');
	t.is((await two.exited).code, 0, two.text());
	t.is(two.lines.filter(line => line.msg === POLLING_WARNING).length, 1, 'once for the cluster, not once per worker');

	const one = await startCluster(t, ['--reject-period', '300ms'], APP, {workers: 1});
	for (let i = 0; i < 3; i++) {
		await client(url(one.port, poll), {agent: {}, headers: {connection: 'close'}});
	}

	one.kill('SIGTERM');
	t.is((await one.exited).code, 0, one.text());
	t.falsy(one.lines.find(line => line.msg === POLLING_WARNING), 'one worker: every poll reaches it');
});
