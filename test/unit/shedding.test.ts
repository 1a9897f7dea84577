// --max-event-loop-delay in-process: the drain's samples flip its filters between
// SERVING and SHED; what a shed request gets, what in-flight ones keep, the probes,
// the episode's lines and counts, and the primary's cluster-wide verdict.
import test from 'ava';
import http from 'node:http';
import type {AddressInfo} from 'node:net';
import {pEvent} from 'p-event';
import {envelope, parseMessage, TO_PRIMARY, TO_WORKER, type ToPrimary, type ToWorker} from '../../src/protocol.js';
import {DEFAULT_SETTINGS, DEFAULT_WORKER_SETTINGS} from '../../src/settings.js';
import {ProcessDrain} from '../../src/worker/drain.js';
import {everyWorkerSheds} from '../../src/primary/shedding.js';
import type {WorkerRecord} from '../../src/primary/worker-record.js';
import {captureLogger, FAKE_TIMELINE, FakeClock, fakePrimary, type FakeWorker} from '../helpers/fakes.js';
import {client, RawConnection} from '../helpers/http.js';

async function rig(t: import('ava').ExecutionContext, maxEventLoopDelayMs = 100) {
	const clock = new FakeClock();
	const {logger, lines} = captureLogger('worker');
	const drain = new ProcessDrain({...DEFAULT_WORKER_SETTINGS, retryAfterSeconds: 3, maxEventLoopDelayMs}, logger, clock, {exitListeners: () => []});
	const held: http.ServerResponse[] = [];
	const seen: string[] = [];
	const server = http.createServer((request, response) => {
		seen.push(request.url!);
		if (request.url!.startsWith('/hold')) {
			held.push(response);
			return;
		}

		response.end('app');
	});
	const filter = drain.addServer(server);
	drain.setHost({
		progress() {},
		hooksStarting(_counts, proceed: () => void) {
			proceed();
		},
		finish() {},
	});
	server.listen(0, '127.0.0.1');
	await pEvent(server, 'listening');
	const {port} = server.address() as AddressInfo;
	t.teardown(() => {
		server.closeAllConnections();
		server.close();
	});
	const shedLines = () => lines.filter(line => line.msg.startsWith('shedding new requests') || line.msg === 'stopped shedding');
	return {clock, drain, filter, server, held, seen, lines, shedLines, port, url: (path: string) => `http://127.0.0.1:${port}${path}`};
}

test('a sample over the limit sheds new requests: 503 + Retry-After at once, the connection kept, the app never sees them; in flight untouched; back to serving on the first sample under it', async t => {
	const r = await rig(t);
	const connection = await RawConnection.open(r.port);
	const inflight = connection.request('/hold-1');
	await pEvent(r.server, 'request');
	r.drain.loopSample(50);
	t.deepEqual(r.shedLines(), [], 'under the limit: nothing');
	r.drain.loopSample(250);
	t.deepEqual(r.drain.sheddingStats, {shed: 0, sheddingMs: 0, shedding: true});

	const shed = await RawConnection.open(r.port);
	const answer = await shed.request('/new');
	t.is(answer.status, 503);
	t.is(answer.headers['retry-after'], '3');
	t.is(answer.headers['connection'], 'keep-alive', 'a close would send the client back through node:cluster\'s hand-off to this busy worker');
	t.regex(answer.body, /overloaded/);
	const got = await client(r.url('/other'));
	t.is(got.statusCode, 503);
	t.deepEqual(r.seen, ['/hold-1'], 'the app saw neither');

	// Probes keep answering: alive, and ready (other workers may serve).
	t.is((await client(r.url('/livez'))).statusCode, 200);
	t.is((await client(r.url('/readyz'))).statusCode, 200);

	// The request in flight finishes as it would have, its connection kept alive.
	r.held[0]!.end('done');
	const done = await inflight;
	t.is(done.status, 200);
	t.is(done.body, 'done');
	t.not(done.headers['connection'], 'close');

	t.is(r.filter.shed, 2);
	t.is(r.filter.rejected, 0, 'not the drain\'s rejections');
	t.is(r.filter.requests, 1, 'nor requests handed to the app');

	r.clock.advance(700);
	r.drain.loopSample(250);
	t.is(r.shedLines().length, 1, 'one warning per episode, however many samples');
	r.drain.loopSample(80);
	t.deepEqual(r.drain.sheddingStats, {shed: 2, sheddingMs: 700, shedding: false});
	t.like(r.shedLines()[0], {level: 'warn', loopDelayMs: 250, maxEventLoopDelayMs: 100});
	t.like(r.shedLines()[1], {msg: 'stopped shedding', level: 'info', shed: 2, durationMs: 700});
	t.is(r.shedLines()[1]!['endedBy'], undefined);

	// Serving again, on the same kept-alive connections too, the shed one's included.
	t.is((await connection.request('/again')).body, 'app');
	t.is((await shed.request('/retried')).body, 'app');
	t.is((await client(r.url('/after'))).body, 'app');

	// A second episode counts on from the first.
	r.drain.loopSample(101);
	await client(r.url('/x'));
	r.clock.advance(300);
	r.drain.loopSample(0);
	t.deepEqual(r.drain.sheddingStats, {shed: 3, sheddingMs: 1000, shedding: false});
	t.like(r.shedLines()[3], {msg: 'stopped shedding', shed: 1, durationMs: 300});
	connection.socket.destroy();
});

test('while shedding, a POST\'s body is read and its connection kept; a client that asks for the close gets it; one sent with Expect: 100-continue (its body may still come) gets the 503 and the close', async t => {
	const r = await rig(t);
	r.drain.loopSample(250);
	const posting = await RawConnection.open(r.port);
	const posted = await posting.request('/upload', {method: 'POST', body: 'x'.repeat(10_000)});
	t.is(posted.status, 503);
	t.is(posted.headers['connection'], 'keep-alive');
	r.drain.loopSample(50);
	t.is((await posting.request('/next')).body, 'app', 'the body was read whole: the next request parses');

	// A client that asks for the close gets it, as from Node itself.
	r.drain.loopSample(250);
	const closing = await RawConnection.open(r.port);
	closing.socket.write('GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
	const bye = await closing.readResponse();
	t.is(bye.status, 503);
	t.is(bye.headers['connection'], 'close');
	t.is(await closing.closedByServer(), 'fin');

	const expecting = await RawConnection.open(r.port);
	expecting.socket.write('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n');
	const answer = await expecting.readResponse();
	t.is(answer.status, 503);
	t.is(answer.headers['connection'], 'close');
	t.is(await expecting.closedByServer(), 'fin');
	t.deepEqual(r.seen, ['/next'], 'the app saw only the request after recovery');
});

test('readiness answers 503 while this worker sheds and the primary says every worker does; 200 once this one recovers', async t => {
	const r = await rig(t);
	r.drain.everyWorkerSheds = true;
	t.is((await client(r.url('/readyz'))).statusCode, 200, 'not shedding itself: ready');
	r.drain.loopSample(500);
	const overloaded = await client(r.url('/readyz'));
	t.is(overloaded.statusCode, 503);
	t.is(overloaded.body, 'overloaded\n');
	const probe = await RawConnection.open(r.port);
	t.is((await probe.request('/readyz')).status, 503);
	t.is((await probe.request('/readyz')).status, 503, 'the probe\'s connection stays open, as while serving');
	probe.close();
	t.is((await client(r.url('/livez'))).statusCode, 200);
	r.drain.everyWorkerSheds = false;
	t.is((await client(r.url('/readyz'))).statusCode, 200);
	r.drain.everyWorkerSheds = true;
	r.drain.loopSample(0);
	t.is((await client(r.url('/readyz'))).statusCode, 200);
});

test('a drain that starts while shedding takes over: the episode ends with endedBy, the drain\'s own answers apply, samples no longer shed', async t => {
	const r = await rig(t);
	r.drain.loopSample(300);
	t.is((await client(r.url('/a'))).statusCode, 503);
	r.clock.advance(200);
	r.drain.begin({servePeriodMs: 1000, rejectPeriodMs: 1000, gracePeriodMs: 10_000});
	t.like(r.shedLines()[1], {msg: 'stopped shedding', shed: 1, durationMs: 200, endedBy: 'drain'});
	const served = await client(r.url('/b'));
	t.is(served.statusCode, 200, 'the serve phase serves');
	t.is(served.headers.connection, 'close');
	r.drain.loopSample(900);
	t.is((await client(r.url('/c'))).statusCode, 200, 'no shedding during a drain');
	t.is(r.shedLines().length, 2);
	t.is((await client(r.url('/readyz'))).statusCode, 503, 'the drain\'s readiness');
	r.clock.advance(1000);
	const rejected = await client(r.url('/d'));
	t.is(rejected.statusCode, 503);
	t.regex(rejected.body, /shutting down/);
	t.is(r.filter.shed, 1);
	t.is(r.filter.rejected, 1);
});

test('off (0): samples change nothing, and the heartbeat carries no shedding figures', async t => {
	const r = await rig(t, 0);
	r.drain.loopSample(10_000);
	t.is((await client(r.url('/a'))).statusCode, 200);
	t.is(r.drain.sheddingStats, undefined);
	t.deepEqual(r.shedLines(), []);
});

test('a server attached while shedding sheds too', async t => {
	const r = await rig(t);
	r.drain.loopSample(300);
	const late = http.createServer((_request, response) => response.end('late'));
	late.listen(0, '127.0.0.1');
	await pEvent(late, 'listening');
	t.teardown(() => late.close());
	r.drain.addServer(late);
	t.is((await client(`http://127.0.0.1:${(late.address() as AddressInfo).port}/`)).statusCode, 503);
	r.drain.loopSample(0);
	t.is((await client(`http://127.0.0.1:${(late.address() as AddressInfo).port}/`)).body, 'late');
});

test('protocol: the heartbeat\'s shedding fields are optional and checked; the shedding message carries a boolean', t => {
	const beat: ToPrimary = {type: 'heartbeat', rssBytes: 1, heapUsedBytes: 1, loopDelayMs: 0, requests: 0, inflight: 0, shed: 4, sheddingMs: 1200, shedding: true};
	t.like(parseMessage(envelope(beat), TO_PRIMARY), {kind: 'ours'});
	t.like(parseMessage(envelope({...beat, shed: -1}), TO_PRIMARY), {kind: 'invalid'});
	t.like(parseMessage(envelope({...beat, shedding: 'yes'} as unknown as ToPrimary), TO_PRIMARY), {kind: 'invalid'});
	const {shed: _shed, sheddingMs: _ms, shedding: _on, ...older} = beat;
	t.like(parseMessage(envelope(older), TO_PRIMARY), {kind: 'ours'});
	const message: ToWorker = {type: 'shedding', all: true};
	t.like(parseMessage(envelope(message), TO_WORKER), {kind: 'ours', message: {all: true}});
	t.like(parseMessage(envelope({type: 'shedding'} as unknown as ToWorker), TO_WORKER), {kind: 'invalid'});
	t.like(parseMessage(envelope(message), TO_PRIMARY), {kind: 'invalid'});
});

test('primary: every worker sheds only when every serving member says so in its last heartbeat', t => {
	const worker = (shedding: boolean | undefined, state: WorkerRecord['state'] = {name: 'listening', role: 'member', attached: true, addresses: []}): WorkerRecord =>
		({state, health: {at: 0, rssBytes: 0, heapUsedBytes: 0, loopDelayMs: 0, requests: 0, inflight: 0, shedding}}) as unknown as WorkerRecord;
	t.false(everyWorkerSheds([]));
	t.true(everyWorkerSheds([worker(true)]));
	t.true(everyWorkerSheds([worker(true), worker(true)]));
	t.false(everyWorkerSheds([worker(true), worker(false)]));
	t.false(everyWorkerSheds([worker(true), worker(undefined)]));
	t.true(everyWorkerSheds([worker(true), worker(false, {name: 'starting', role: 'member', attached: false})]), 'one not serving yet does not count');
});

test('primary: with two workers, one shedding leaves both ready; when both shed each is told, and told again when one recovers; off, nothing is sent', t => {
	const p = fakePrimary({settings: {...DEFAULT_SETTINGS, ...FAKE_TIMELINE, maxEventLoopDelayMs: 100}});
	const [a, b] = p.serveAll();
	const told = (worker: FakeWorker) => worker.received.filter(message => message['type'] === 'shedding').map(message => message['all']);
	a!.beat({shed: 3, sheddingMs: 200, shedding: true});
	b!.beat({shed: 0, sheddingMs: 0, shedding: false});
	t.deepEqual([told(a!), told(b!)], [[], []], 'one sheds, the other serves: both ready');
	b!.beat({shed: 1, sheddingMs: 100, shedding: true});
	t.deepEqual([told(a!), told(b!)], [[true], [true]]);
	a!.beat({shed: 5, sheddingMs: 1200, shedding: true});
	t.deepEqual([told(a!), told(b!)], [[true], [true]], 'told once');
	a!.beat({shed: 5, sheddingMs: 1300, shedding: false});
	t.deepEqual([told(a!), told(b!)], [[true, false], [true, false]]);

	const off = fakePrimary();
	const [c] = off.serveAll();
	c!.beat({shed: 1, sheddingMs: 100, shedding: true});
	t.deepEqual(told(c!), []);
});
