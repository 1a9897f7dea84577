// Connections node:cluster's round-robin strands in the primary (primary/handoffs.ts):
// accepted while the only worker on the port could not take them (its event loop
// stalled), and then the worker stopped listening or died. Without the primary's
// answer, the one on its way to the worker hangs until the primary exits and the
// ones still queued are reset.
import {once} from 'node:events';
import http2 from 'node:http2';
import {performance} from 'node:perf_hooks';
import test from 'ava';
import {freePort, url} from '../../testkit/net.js';
import {fixture, startCluster, type LogLine} from '../helpers/cluster.js';
import {client, rawExchange} from '../helpers/http.js';

const STALL_MS = 1500;
const STRANDED = 'node:cluster accepted a connection and had no worker left to take it (none listening on its port any more, or the one it was sent to exited); the primary answered it';

interface Outcome {
	readonly received: string;
	readonly closed: boolean;
	/** From the connection's start, ms. */
	readonly tookMs: number;
}

/** A request written on a new connection, and what came back until the server closed it (or 10 s). */
async function exchange(port: number, text: string): Promise<Outcome> {
	const startedAt = performance.now();
	const {received, closed} = await rawExchange(port, text, {ms: 10_000});
	return {received, closed, tookMs: performance.now() - startedAt};
}

/** The same, its request line in two pieces 300 ms apart (the primary waits for the whole line). */
async function exchangeInPieces(port: number, text: string): Promise<Outcome> {
	const startedAt = performance.now();
	const {received, closed} = await rawExchange(port, text.slice(0, 7), {
		ms: 10_000,
		after(socket) {
			setTimeout(() => socket.write(text.slice(7)), 300);
		},
	});
	return {received, closed, tookMs: performance.now() - startedAt};
}

/** An HTTP/2 (prior knowledge) client's two streams on a new connection: how each ended. */
async function http2Streams(port: number): Promise<Array<{code: string | undefined; rstCode: number | undefined}>> {
	const session = http2.connect(`http://127.0.0.1:${port}`);
	session.on('error', () => {});
	try {
		return await Promise.all([0, 1].map(async () => {
			const stream = session.request({':path': '/'});
			stream.resume();
			const [error] = await Promise.race([once(stream, 'error'), once(stream, 'close').then(() => [undefined])]) as [NodeJS.ErrnoException | undefined];
			return {code: error?.code, rstCode: stream.rstCode};
		}));
	} finally {
		session.destroy();
	}
}

/** What the clients connecting during the stall sent: two HTTP/1.1 requests (one in pieces), an HTTP/2 connection, and bytes of no protocol the primary knows. */
async function connectDuringStall(port: number) {
	const request = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';
	const [first, second, h2, other] = await Promise.all([
		exchange(port, request),
		exchangeInPieces(port, request),
		http2Streams(port),
		exchange(port, '\u0016\u0003\u0001\u0000\u00c8 a TLS ClientHello, say'),
	]);
	return {http1: [first!, second!], h2: h2!, other: other!};
}

function assertAnswered(t: import('ava').ExecutionContext, {http1, h2, other}: Awaited<ReturnType<typeof connectDuringStall>>, log: string): void {
	for (const each of http1) {
		t.regex(each.received, /^HTTP\/1\.1 503 Service Unavailable\r\n/, log);
		t.regex(each.received, /\r\nConnection: close\r\n/i);
		t.regex(each.received, /\r\nRetry-After: 1\r\n/i);
		// Not a drain: the body does not say the server is shutting down.
		t.regex(each.received, /no worker could take this connection/);
		t.true(each.closed, 'closed by the primary after its answer');
		// Answered as the stall ends, not when the primary exits.
		t.true(each.tookMs < STALL_MS + 3000, `answered after ${Math.round(each.tookMs)} ms`);
	}

	// GOAWAY with last stream 0: each stream refused, so a client retries it elsewhere.
	t.deepEqual(h2, [{code: 'ERR_HTTP2_STREAM_ERROR', rstCode: http2.constants.NGHTTP2_REFUSED_STREAM}, {code: 'ERR_HTTP2_STREAM_ERROR', rstCode: http2.constants.NGHTTP2_REFUSED_STREAM}], log);
	t.is(other.received, '', 'the primary does not speak for an app protocol it cannot tell');
	t.true(other.closed);
}

const answersOf = (lines: readonly LogLine[]): unknown[] => lines.filter(line => line.msg === STRANDED).map(line => line['answer']).sort();

test('the app closes its only server while connections wait in node:cluster: the primary answers each (503, GOAWAY, or a close)', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('stalls.mjs'), {workers: 1});
	t.is((await client(url(app.port, `/stall?ms=${STALL_MS}&then=close`))).body, 'stalling');
	await app.waitForLog('fixture stalling');
	assertAnswered(t, await connectDuringStall(app.port), app.text().slice(-3000));
	await app.waitForLog(line => line.msg === STRANDED, {count: 4});
	t.deepEqual(answersOf(app.lines), ['503', '503', 'closed', 'goaway']);
	app.kill('SIGTERM');
	t.like(await app.exitWithin(15_000), {code: 0});
});

test('the only worker crashes while connections wait in node:cluster: the primary answers each, and the restarted worker serves', async t => {
	// A port of its own: the restarted worker listens on the same one.
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('stalls.mjs'), {workers: 1, env: {PORT: String(await freePort())}});
	t.is((await client(url(app.port, `/stall?ms=${STALL_MS}&then=exit`))).body, 'stalling');
	await app.waitForLog('fixture stalling');
	assertAnswered(t, await connectDuringStall(app.port), app.text().slice(-3000));
	await app.waitForLog(line => line.msg === STRANDED, {count: 4});
	t.deepEqual(answersOf(app.lines), ['503', '503', 'closed', 'goaway']);
	await app.waitForLog('worker listening', {count: 2});
	t.is((await client(url(app.port, '/'))).body, 'hello');
	app.kill('SIGTERM');
	t.like(await app.exitWithin(15_000), {code: 0});
});

test('the reject phase ends while connections wait in node:cluster: the primary answers them before it exits, and drain finished counts them', async t => {
	const rejectMs = 2000;
	const app = await startCluster(t, ['--reject-period', `${rejectMs}ms`, '--grace-period', '20s'], fixture('stalls.mjs'), {
		workers: 1,
		// The stall ends 300 ms after the reject phase would have: its end (the filter closing the server) comes right after.
		env: {FIXTURE_DRAIN_STALL_MS: String(STALL_MS), FIXTURE_DRAIN_STALL_AT_MS: String(rejectMs + 300 - STALL_MS)},
	});
	app.kill('SIGTERM');
	await app.waitForLog('fixture stalling');
	const request = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n';
	const answered = Promise.all([1, 2, 3].map(async () => exchange(app.port, request)));
	// The worker has nothing in flight: it leaves as soon as the reject phase is over, and the primary with it.
	t.like(await app.exitWithin(15_000), {code: 0}, app.text().slice(-3000));
	for (const each of await answered) {
		t.regex(each.received, /^HTTP\/1\.1 503 Service Unavailable\r\n/, app.text().slice(-3000));
		t.regex(each.received, /\r\nRetry-After: 1\r\n/i);
		t.true(each.closed);
	}

	// The one on its way to the worker as the stall ended is the worker's if it read it before
	// its server closed (answered 503 too: its request counts as an arrival), else stranded.
	const summary = app.lines.find(line => line.msg === 'drain finished')!;
	t.like(summary, {outcome: 'clean'});
	t.is(Number(summary['strandedConnections']) + Number(summary['arrivals']), 3, JSON.stringify(summary));
	t.true(Number(summary['strandedConnections']) >= 2, 'the two still queued in node:cluster at least');
	t.deepEqual(answersOf(app.lines), [], 'counted in drain finished, not logged one by one');
});

test('no connection is stranded in an ordinary drain: strandedConnections is 0', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '10s'], fixture('stalls.mjs'), {workers: 2, env: {FIXTURE_DRAIN_STALL_MS: '0', FIXTURE_DRAIN_STALL_AT_MS: '0'}});
	t.is((await client(url(app.port, '/'))).body, 'hello');
	app.kill('SIGTERM');
	t.like(await app.exitWithin(15_000), {code: 0});
	t.like(app.lines.find(line => line.msg === 'drain finished'), {strandedConnections: 0});
	t.falsy(app.lines.find(line => line.msg === STRANDED));
});
