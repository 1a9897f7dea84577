// Apps as their authors wrote them (no attach()), at the edges of a drain: a
// reload, a recycle, a worker still loading at the signal, shutdown code that
// fails, arms a second signal or comes late, keep-alive clients, pipelining,
// slow readers, long-lived connections. The drain takes their servers as they
// listen. (test/fixtures/libraries/: one small app per library.)
import test from 'ava';
import type {ExecutionContext} from 'ava';
import {once} from 'node:events';
import http from 'node:http';
import net from 'node:net';
import {performance} from 'node:perf_hooks';
import {setTimeout as sleep} from 'node:timers/promises';
import {url} from '../../testkit/net.js';
import {start} from '../helpers/cluster.js';
import {client, RawConnection} from '../helpers/http.js';
import {app, cleanupDone, drainFinished, startApp, WORKERS} from '../helpers/libraries.js';

const bigResponses = {
	GET: {text: 'GET / HTTP/1.1\r\nHost: x\r\n\r\n', what: 'a GET', env: {}},
	POST: {text: `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n${'b'.repeat(100_000)}`, what: 'a POST whose body the app never reads', env: {}},
	// Its headers go out after the signal, with the drain's `Connection: close`: Node
	// closes the socket itself once the response is out, the 8 MB upload unread.
	'POST, answered after the signal': {text: `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ${8 * 1024 * 1024}\r\n\r\n${'b'.repeat(8 * 1024 * 1024)}`, what: 'an 8 MB upload the app never reads, answered after the signal with Connection: close', env: {FIXTURE_DELAY_MS: '1000'}},
	// Node answers bytes that are not HTTP with a destroy: after the last response,
	// with the rest unread, that was a reset (found by a hostile trial).
	'POST, then garbage': {text: `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n${'b'.repeat(1_000_000)}${'a'.repeat(1_100_000)}`, what: 'a 1 MB upload the app never reads followed by 1.1 MB that is not HTTP, answered after the signal', env: {FIXTURE_DELAY_MS: '1000'}},
} as const;

for (const {text, what, env} of Object.values(bigResponses)) {
	test(`a response written in one go to a slow client is delivered whole: the end of the reject phase and of the drain do not cut it (${what})`, async t => {
		const proc = await startApp(t, 'big-response', {workers: 1, options: ['--reject-period', '500ms'], env});
		const net = await import('node:net');
		const socket = net.connect(proc.port, '127.0.0.1');
		t.teardown(() => socket.destroy());
		// The unread body sits in the worker's receive buffer when the socket is
		// closed: closing a socket with unread bytes in it is a reset, which throws
		// away the response's tail still in the send buffer.
		socket.write(text);
		const chunks: Buffer[] = [];
		socket.on('data', chunk => {
			chunks.push(chunk);
			// About 4 MB/s: the 16 MB body needs several seconds, well past the reject phase.
			socket.pause();
			setTimeout(() => socket.resume(), 15);
		});
		const closed = new Promise<string>(resolve => {
			socket.once('error', error => {
				resolve((error as NodeJS.ErrnoException).code ?? error.message);
			});
			socket.once('close', () => {
				resolve('close');
			});
		});
		await proc.waitForLog('fixture request started');
		proc.kill('SIGTERM');
		await proc.waitForLog('stopped listening; waiting for requests in flight');
		t.is(await closed, 'close', 'the connection ends with a FIN, not a reset');
		const received = Buffer.concat(chunks);
		const headerEnd = received.indexOf('\r\n\r\n');
		const length = Number(/content-length: (\d+)/i.exec(received.subarray(0, headerEnd).toString('latin1'))?.[1]);
		t.is(length, 16 * 1024 * 1024);
		t.is(received.length - headerEnd - 4, length, 'the whole body arrived');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
		t.like(drainFinished(proc), {outcome: 'clean', served: 1, aborted: 0, responsesCut: 0});
	});
}

test('a reload with an app that re-reads its config on SIGHUP: the retiring workers run it and their SIGTERM cleanup, and leave at once', async t => {
	const proc = await startApp(t, 'config-reload');
	const before = proc.lines.filter(line => line.msg === 'fixture listening').map(line => Number(line['pid']));
	const startedAt = performance.now();
	proc.kill('SIGHUP');
	await proc.waitForLog('reload finished', {timeout: 30_000});
	await proc.waitForLog(line => line.msg === 'worker exited' && before.includes(Number(line['workerPid'])), {count: WORKERS, timeout: 15_000});
	const tookMs = performance.now() - startedAt;
	t.true(tookMs < 15_000, `the retiring workers left after ${Math.round(tookMs)} ms, not at the 20 s deadline`);
	t.falsy(proc.lines.find(line => line.msg === 'retiring worker still running at the deadline; killing it'));
	for (const pid of before) {
		t.like(proc.lines.find(line => line.msg === 'fixture config reloaded' && line['pid'] === pid), {signal: 'SIGHUP'});
		t.truthy(proc.lines.find(line => line.msg === 'fixture cleanup' && line['step'] === 'done' && line['pid'] === pid), `pool closed in ${pid}`);
	}

	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
});

test('a recycle (--max-requests): the retiring worker runs the app\'s SIGTERM cleanup, not its SIGHUP one, and leaves at once', async t => {
	const proc = await startApp(t, 'config-reload', {workers: 1, options: ['--max-requests', '3']});
	const [first] = proc.lines.filter(line => line.msg === 'fixture listening').map(line => Number(line['pid']));
	for (let index = 0; index < 4; index++) {
		t.is((await client(url(proc.port, '/'))).statusCode, 200);
	}

	await proc.waitForLog(line => line.msg === 'worker exited' && Number(line['workerPid']) === first, {timeout: 15_000});
	t.like(proc.lines.find(line => line.msg === 'fixture shutdown' && line['pid'] === first), {signal: 'SIGTERM'});
	t.falsy(proc.lines.find(line => line.msg === 'fixture config reloaded'), 'no SIGHUP was sent to anyone');
	t.falsy(proc.lines.find(line => line.msg === 'retiring worker still running at the deadline; killing it'));
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
});

test('an unchanged app (no attach()): a worker whose event loop is busy at the signal still runs the app\'s listener before it leaves', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, options: ['--reject-period', '300ms']});
	const busy = client(url(proc.port, '/busy'));
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	t.is((await busy).statusCode, 200);
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	t.truthy(proc.lines.find(line => line.msg === 'running the app\'s own signal listeners'), proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1, 'its cleanup ran to its end');
});

test('busy WebSockets and event streams at the reject phase\'s end: the close frame and the end go out behind the queued data, 1001 and clean ends, none cut', async t => {
	const {WebSocket} = await import('ws');
	const http = await import('node:http');
	const proc = await startApp(t, 'busy-long-lived', {workers: 1, options: ['--reject-period', '800ms']});
	const sockets = Array.from({length: 3}, () => new WebSocket(`ws://127.0.0.1:${proc.port}/ws`));
	t.teardown(() => {
		for (const socket of sockets) {
			socket.terminate();
		}
	});
	const codes = sockets.map(async socket => new Promise<number>(resolve => {
		socket.on('error', () => undefined);
		socket.on('close', code => {
			resolve(code);
		});
	}));
	const streams = [1, 2].map(async () => new Promise<{complete: boolean; bytes: number}>(resolve => {
		http.get(url(proc.port, '/events'), response => {
			let bytes = 0;
			let tail = '';
			response.on('data', (chunk: Buffer) => {
				bytes += chunk.length;
				tail = (tail + chunk.toString('latin1')).slice(-4);
			});
			response.on('end', () => {
				resolve({complete: response.complete && tail.endsWith('\n\n'), bytes});
			});
			response.on('aborted', () => {
				resolve({complete: false, bytes});
			});
		});
	}));
	await proc.waitForLog('fixture ws opened', {count: 3});
	await proc.waitForLog('fixture stream opened', {count: 2});
	proc.kill('SIGTERM');
	t.deepEqual(await Promise.all(codes), [1001, 1001, 1001], 'a close frame each, never 1006');
	for (const stream of await Promise.all(streams)) {
		t.true(stream.complete, `a whole stream, ended on an event boundary (${stream.bytes} bytes)`);
	}

	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	t.like(drainFinished(proc), {outcome: 'clean', closedLongLived: 5, longLivedCut: 0});
});

test('WebSockets closed by the drain, then a hook that ends the worker itself: the summary still counts them', async t => {
	const {WebSocket} = await import('ws');
	const proc = await startApp(t, 'busy-long-lived', {workers: 1, options: ['--reject-period', '500ms']});
	const sockets = Array.from({length: 2}, () => new WebSocket(`ws://127.0.0.1:${proc.port}/ws`));
	t.teardown(() => {
		for (const socket of sockets) {
			socket.terminate();
		}
	});
	await proc.waitForLog('fixture ws opened', {count: 2});
	// SIGINT: the fixture's own listener for it ends the process (process.exit(0)).
	proc.kill('SIGINT');
	t.like(await proc.exitWithin(15_000), {code: 0}, proc.text().slice(-3000));
	// What this test holds: both are counted although a hook ended the worker.
	// Whether a busy socket's close finished within 2 s depends on how fast this
	// process reads (a loaded CI machine: one was cut); the busy-connection test
	// above holds that part.
	const finished = drainFinished(proc);
	t.like(finished, {closedLongLived: 2});
	t.true(Number(finished?.['longLivedCut']) <= 2, 'any cut is among the closed ones');
});

// A SIGTERM a few ms after a SIGHUP, while the reload's new worker is still
// loading: its reject phase ends before the app is up. A worker that had not
// attached then was disconnected at once, and its app came up in a worker that
// could no longer listen (node:cluster neither calls back nor fails): shutdown
// code set up once listening (lightship; a listener registered in the listen
// callback) never was, a listener registered before listen() was never called,
// http-terminator's terminate() rejected on the server that never ran; either
// way the worker waited for the deadline's kill (exit 3, "1 worker lost").
const slowStarts = [
	{name: 'http-terminator'},
	{name: 'lightship', why: 'its signal listeners come once its probe server listens'},
	{name: 'no-attach-pool', why: 'no attach()'},
	{name: 'no-attach-pool', why: 'no attach(), its listener registered in the listen callback', env: {FIXTURE_LISTENER: 'in-listen-callback'}},
	{name: 'late-second-server', why: 'no attach(), a metrics server listens first, the app server 500 ms later'},
	{name: 'shutdown-two-signals', why: 'no attach(), one shutdown function for SIGINT, then SIGTERM a turn later: it runs once'},
] as const;
for (const {name, why, env} of slowStarts as ReadonlyArray<{name: string; why?: string; env?: Record<string, string>}>) {
	test(`SIGTERM while a reload's new worker is still loading (${name}${why ? `: ${why}` : ''}): once its app is up its cleanup runs to its end and it leaves; exit 0, not the deadline`, async t => {
		const proc = start(t, ['--workers', '1', '--reject-period', '500ms', '--grace-period', '10s', app('slow-start')], {env: {FIXTURE_APP: name, FIXTURE_SLOW_FROM: '2', FIXTURE_START_MS: '1500', ...env}});
		await proc.waitForLog('fixture listening', {timeout: 30_000});
		proc.kill('SIGHUP');
		const loading = await proc.waitForLog('fixture loading', {timeout: 15_000});
		proc.kill('SIGTERM');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-4000));
		const candidate = loading['pid'];
		t.truthy(cleanupDone(proc).find(line => line['pid'] === candidate), `the new worker's cleanup ran to its end:\n${proc.text().slice(-4000)}`);
		t.like(proc.lines.find(line => line.msg === 'worker exited' && line['workerPid'] === candidate), {code: 0, signal: null, reason: 'drain'});
		t.like(drainFinished(proc), {outcome: 'clean', exitCode: 0, workersLost: 0, hooksFailed: 0, responsesCut: 0});
		t.falsy(proc.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'), proc.text().slice(-4000));
	});
}

// A worker without attach() runs the app's listeners when the reject phase ends,
// which is when the primary disconnects it: a failure after that could not be
// sent, and the drain read clean (exit 0, hooksFailed 0).
for (const fail of ['reject', 'throw'] as const) {
	test(`an unchanged app (no attach()): a listener that fails (${fail === 'reject' ? 'rejects after its cleanup' : 'throws at once'}) is counted: hooksFailed, exit 7, no worker lost`, async t => {
		const proc = await startApp(t, 'no-attach-failing', {workers: 1, options: ['--reject-period', '300ms'], env: {FIXTURE_FAIL: fail}});
		proc.kill('SIGTERM');
		t.like(await proc.exitWithin(15_000), {code: 7, signal: null}, proc.text().slice(-3000));
		t.truthy(proc.lines.find(line => line.msg === 'a shutdown hook failed; running the rest'));
		t.like(drainFinished(proc), {outcome: 'hooks-failed', exitCode: 7, hooksFailed: 1, workersLost: 0, responsesCut: 0});
		t.like(proc.lines.find(line => line.msg === 'worker exited'), {reason: 'drain'});
	});
}

test('an unchanged app (no attach()): a listener that arms "a second SIGTERM forces the exit" during its shutdown: that one is not called, the cleanup runs to its end, exit 0', async t => {
	const proc = await startApp(t, 'force-exit', {workers: 1, options: ['--reject-period', '300ms']});
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1);
	t.falsy(proc.lines.find(line => line.msg === 'fixture forced exit'));
	t.like(drainFinished(proc), {outcome: 'clean', workersLost: 0});
});

test('an unchanged app (no attach()): a shutdown registered lazily during the reject phase, in two pieces 200 ms apart: both run, exit 0', async t => {
	const proc = await startApp(t, 'lazy-listeners', {workers: 1, options: ['--reject-period', '2500ms', '--grace-period', '10s']});
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.is(cleanupDone(proc).length, 1, proc.text().slice(-3000));
	t.like(drainFinished(proc), {outcome: 'clean', workersLost: 0});
});

test('an unchanged app (no attach()): a keep-alive response still on its way across the reject phase\'s end is told Connection: close: the worker leaves when it is out, not at keepAliveTimeout (65 s) or the deadline', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '500ms', env: {FIXTURE_KEEP_ALIVE_MS: '65000'}});
	const keepAlive = await RawConnection.open(proc.port);
	t.teardown(() => {
		keepAlive.close();
	});
	const slow = keepAlive.request('/slow?ms=1500');
	await proc.waitForLog('fixture request started');
	const signalledAt = performance.now();
	proc.kill('SIGTERM');
	t.like(await slow, {status: 200, headers: {connection: 'close'}});
	t.is(await keepAlive.closedByServer(), 'fin');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	const tookMs = performance.now() - signalledAt;
	t.true(tookMs < 5000, `left ${Math.round(tookMs)} ms after the signal`);
});

// A server's 'close' is an app's cue to end what the server used (a pool, a
// tracer): one that is not idempotent throws at a second. Node emits it once
// per close() that finds nothing left, so each close the drain adds itself,
// after node:cluster's, is one the app would see twice.
const closesOnce = [
	{title: 'at a SIGTERM', closes: false, reload: false},
	{title: 'at a SIGTERM, the app closing its server itself', closes: true, reload: false},
	{title: 'at a reload, then a SIGTERM, the app closing its server itself', closes: true, reload: true},
];
for (const {title, closes, reload} of closesOnce) {
	test(`an unchanged app (no attach()): the server's 'close' fires once per worker ${title}; an app that throws at a second exits 0`, async t => {
		const env: Record<string, string> = {FIXTURE_STRICT_CLOSE: '1', ...(closes ? {FIXTURE_CLOSE_ON_SIGTERM: '1'} : {})};
		const proc = await startApp(t, 'no-attach', {rejectPeriod: '500ms', env});
		if (reload) {
			proc.kill('SIGHUP');
			await proc.waitForLog('reload finished', {timeout: 30_000});
			// The retired workers' closes are out once both have exited.
			await proc.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {count: WORKERS, timeout: 15_000});
		}

		proc.kill('SIGTERM');
		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-4000));
		const closed = proc.lines.filter(line => line.msg === 'fixture server closed');
		const workers = reload ? 2 * WORKERS : WORKERS;
		t.deepEqual(closed.map(line => line['count']), Array.from({length: workers}, () => 1), proc.text().slice(-4000));
		t.is(new Set(closed.map(line => line['pid'])).size, workers);
		if (closes) {
			t.deepEqual(proc.lines.filter(line => line.msg === 'fixture server close callback').map(line => line['error']), Array.from({length: workers}, () => null));
		}

		t.like(drainFinished(proc), {exitCode: 0, hooksFailed: 0, workersLost: 0});
	});
}

// A client may send a request behind one still being answered (HTTP/1.1
// pipelining: undici's pipelining option, some proxies). Node runs it in the app
// at once; told Connection: close, the first response would end the
// connection, and the second, the POST's, ran but was thrown away.
for (const signal of ['SIGTERM', 'SIGHUP'] as const) {
	test(`an unchanged app (no attach()): a ${signal} while a GET is answered with a POST pipelined behind it: both responses arrive, then the connection closes`, async t => {
		const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '500ms', env: {FIXTURE_KEEP_ALIVE_MS: '65000'}});
		const connection = await RawConnection.open(proc.port);
		t.teardown(() => {
			connection.close();
		});
		connection.socket.write('GET /slow?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\nPOST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc');
		await proc.waitForLog('fixture request started');
		const signalledAt = performance.now();
		proc.kill(signal);
		t.like(await connection.readResponse(), {status: 200, body: 'slow'});
		t.like(await connection.readResponse(), {status: 200, body: 'hello'});
		// Its last responses out and its client quiet for 1 s, the connection is closed: the worker need not wait for the client or keepAliveTimeout (65 s).
		t.is(await connection.closedByServer(), 'fin');
		if (signal === 'SIGHUP') {
			await proc.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {timeout: 15_000});
		}

		const tookMs = performance.now() - signalledAt;
		t.true(tookMs < 8000, `the worker left ${Math.round(tookMs)} ms after the signal`);
		if (signal === 'SIGHUP') {
			proc.kill('SIGTERM');
		}

		t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	});
}

test('an unchanged app (no attach()): a response streaming at a reload, its headers out already: the retired worker closes the connection once it is out and leaves, not at keepAliveTimeout (65 s)', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '500ms', env: {FIXTURE_KEEP_ALIVE_MS: '65000'}});
	const agent = new http.Agent({keepAlive: true});
	t.teardown(() => {
		agent.destroy();
	});
	const streaming = client(url(proc.port, '/stream'), {agent: {http: agent}});
	await proc.waitForLog('fixture request started');
	const signalledAt = performance.now();
	proc.kill('SIGHUP');
	const response = await streaming;
	t.is(response.statusCode, 200);
	t.true(response.body.endsWith('chunk 20\nend\n'), response.body);
	t.is(response.headers.connection, 'keep-alive', 'its headers were out before the reload: too late to say the connection ends');
	await proc.waitForLog(line => line.msg === 'worker exited' && line['workerRole'] === 'retiring', {timeout: 15_000});
	const tookMs = performance.now() - signalledAt;
	t.true(tookMs < 8000, `the retired worker left ${Math.round(tookMs)} ms after the signal`);
	proc.kill('SIGTERM');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
});

const SLOW_READ_SIZE = 8 * 1024 * 1024;

/**
 * An unchanged app (no-attach.mjs) with one worker and a 300 ms reject phase,
 * asked for `path` on a raw keep-alive connection that reads about 4 MB a
 * second, so that the end of an 8 MB response is still in the kernel's buffers
 * when the server is done with it; SIGTERM once the request has started. The
 * reader tells how many bytes came, the last ones as text, and a reset if any.
 */
async function slowReadAcrossSigterm(t: ExecutionContext, path: string) {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '300ms'});
	const socket = net.connect(proc.port, '127.0.0.1');
	t.teardown(() => {
		socket.destroy();
	});
	await once(socket, 'connect');
	const reader = {socket, received: 0, tail: '', error: undefined as string | undefined, closed: once(socket, 'close')};
	socket.on('error', (cause: NodeJS.ErrnoException) => {
		reader.error = cause.code;
	});
	socket.on('data', (chunk: Buffer) => {
		reader.received += chunk.length;
		reader.tail = (reader.tail + chunk.toString('latin1', Math.max(0, chunk.length - 200))).slice(-400);
		socket.pause();
		setTimeout(() => socket.resume(), chunk.length / 4096);
	});
	socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	return {proc, reader};
}

test('an unchanged app (no attach()): a slow reader of an 8 MB keep-alive response sends its next request 200 ms after the server wrote the last bytes: it gets all 8 MB and a clean close, its next request never runs', async t => {
	const {proc, reader} = await slowReadAcrossSigterm(t, '/big');
	// Its headers went out keep-alive, before the drain: the client may send another
	// request, and does, 200 ms after the server's 'finish' (part of the scenario, not
	// a wait: a client still reading, or one that reads the response whole first).
	await proc.waitForLog('fixture request finished', {timeout: 15_000});
	await sleep(200);
	t.true(reader.received < SLOW_READ_SIZE, `still reading: ${reader.received} bytes so far`);
	reader.socket.write('GET /hello HTTP/1.1\r\nHost: x\r\n\r\n');
	await reader.closed;
	t.is(reader.error, undefined, 'no reset');
	t.true(reader.received > SLOW_READ_SIZE, `received ${reader.received} bytes`);
	// Sent on a connection the drain was closing after its last response: not read,
	// not run, and the clean close tells the client to send it again elsewhere.
	t.notRegex(reader.tail, /hello$/);
	t.is(proc.lines.filter(line => line.msg === 'fixture request started').length, 1);
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.like(drainFinished(proc), {outcome: 'clean', served: 1, responsesCut: 0});
});

test('an unchanged app (no attach()): a request a keep-alive client sends as the connection\'s FIN reaches it (the keep-alive race) never runs in the app: its answer could not arrive', async t => {
	const proc = await startApp(t, 'no-attach', {workers: 1, rejectPeriod: '300ms'});
	const socket = net.connect({port: proc.port, host: '127.0.0.1', allowHalfOpen: true});
	t.teardown(() => {
		socket.destroy();
	});
	await once(socket, 'connect');
	let received = '';
	socket.setEncoding('latin1');
	socket.on('data', (chunk: string) => {
		received += chunk;
	});
	// Its headers out before the drain: the response cannot say that the connection ends.
	socket.write('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n');
	await proc.waitForLog('fixture request started');
	proc.kill('SIGTERM');
	await once(socket, 'end');
	t.regex(received, /chunk 20\n[^]*end\n\r\n0\r\n\r\n$/, 'the whole stream');
	// Sent as the FIN arrives, as a client that had not seen it yet would.
	socket.end('POST /slow?ms=10 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi');
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
	t.is(proc.lines.filter(line => line.msg === 'fixture request started').length, 1, 'the request after the FIN did not run');
	t.notRegex(received, /slow/);
});

test('an unchanged app (no attach()): a slow reader of an 8 MB response the app ended in one write, across SIGTERM: every byte arrives, then the connection closes', async t => {
	// The drain closes the server while most of it is still in the socket's buffer.
	const {proc, reader} = await slowReadAcrossSigterm(t, '/big-at-once');
	await reader.closed;
	t.is(reader.error, undefined, 'no reset');
	t.true(reader.received > SLOW_READ_SIZE, `received ${reader.received} of ${SLOW_READ_SIZE} bytes and the headers`);
	t.like(await proc.exitWithin(15_000), {code: 0, signal: null}, proc.text().slice(-3000));
});

