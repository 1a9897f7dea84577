// --max-connection-age with real clients: a raw keep-alive socket (to see the
// header and the close), undici's pool (what service-to-service clients use),
// node:http2 sessions, a ws WebSocket. The apps are test/fixtures/app.mjs,
// long-lived.mjs and http2.mjs.
import test from 'ava';
import {performance} from 'node:perf_hooks';
import {Pool} from 'undici';
import {setTimeout as delay} from 'node:timers/promises';
import {freePort, url} from '../../testkit/net.js';
import {eventually} from '../../testkit/proc.js';
import {openWs} from '../../testkit/long-lived.js';
import {fixture, startCluster} from '../helpers/cluster.js';
import {client, RawConnection} from '../helpers/http.js';
import {connect, MAX_STREAM_ID} from '../helpers/http2.js';

const AGE_MS = 1000;

/** Requests one after another on `connection` until a response carries `Connection: close`; at most `limit`. */
async function untilClose(connection: RawConnection, limit: number): Promise<{responses: number; statuses: number[]; closeAfterMs: number | undefined}> {
	const started = performance.now();
	const statuses: number[] = [];
	for (let i = 0; i < limit; i++) {

		const response = await connection.request('/');
		statuses.push(response.status);
		if (response.headers['connection'] === 'close') {
			return {responses: statuses.length, statuses, closeAfterMs: performance.now() - started};
		}


		await new Promise(resolve => {
			setTimeout(resolve, 20);
		});
	}

	return {responses: statuses.length, statuses, closeAfterMs: undefined};
}

test('HTTP/1.1: a kept-alive connection past its age gets Connection: close on its next response and a FIN after it; every request is answered; counted in /status and /metrics', async t => {
	const metricsPort = await freePort();
	const app = await startCluster(t, ['--max-connection-age', `${AGE_MS}ms`, '--metrics', `127.0.0.1:${metricsPort}`, '--reject-period', '300ms'], fixture('app.mjs'), {workers: 1});
	const connection = await RawConnection.open(app.port);
	const {statuses, closeAfterMs} = await untilClose(connection, 200);
	t.true(statuses.every(status => status === 200), `every request answered: ${statuses.join(',')}`);
	t.not(closeAfterMs, undefined, 'the connection was told to close');
	// Its age is drawn within ±10 %; a request every 20 ms or so.
	t.true(closeAfterMs! >= AGE_MS * 0.9 - 50, `closed after ${Math.round(closeAfterMs!)} ms`);
	t.true(closeAfterMs! <= (AGE_MS * 1.1) + 500, `closed after ${Math.round(closeAfterMs!)} ms`);
	t.is(await connection.closedByServer(), 'fin');

	// The next heartbeat carries the count.
	let aged: unknown;
	await eventually(async () => {
		const status = await client(url(metricsPort, '/status')).json<{workers: Array<{connectionsAged: number | null}>}>();
		aged = status.workers[0]?.connectionsAged;
		return aged === 1;
	}, {timeout: 5000});
	t.is(aged, 1);
	const metrics = await client(url(metricsPort, '/metrics')).text();
	t.regex(metrics, /^graceful_cluster_connections_aged_total 1$/m);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('an app that sets its own Connection: keep-alive (a proxy copying its upstream\'s headers) cannot keep an aged connection open, nor one the drain closes: the close wins, and the next request is never left unanswered', async t => {
	const app = await startCluster(t, ['--max-connection-age', '1s', '--serve-period', '1s', '--reject-period', '300ms'], fixture('keep-alive-header.mjs'), {workers: 1});
	for (const ka of ['set', 'head', 'raw', 'pairs', 'append']) {
		const connection = await RawConnection.open(app.port);
		t.is((await connection.request(`/first?ka=${ka}`)).headers['connection'], 'keep-alive', `${ka}: the app's own header while young`);
		// Time must pass: the age is what is tested.
		await delay(1200);
		const aged = await connection.request(`/aged?ka=${ka}`);
		t.is(aged.status, 200);
		t.is(aged.headers['connection'], 'close', `${ka}: the age's close wins over the app's keep-alive`);
		t.is(await connection.closedByServer(), 'fin', ka);
	}

	// The drain's serve phase: each response is its connection's last.
	const connection = await RawConnection.open(app.port);
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started');
	const last = await connection.request('/during-drain?ka=set');
	t.is(last.status, 200);
	t.is(last.headers['connection'], 'close');
	t.is(await connection.closedByServer(), 'fin');
	t.is((await app.exited).code, 0, app.text());
});

test('HTTP/1.1 without the option: a kept-alive connection is never told to close', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], fixture('app.mjs'), {workers: 1});
	const connection = await RawConnection.open(app.port);
	const {responses, closeAfterMs} = await untilClose(connection, 60);
	t.is(responses, 60);
	t.is(closeAfterMs, undefined);
	connection.close();
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

for (const pipelining of [1, 4]) {
	test(`undici's keep-alive pool under steady load, pipelining ${pipelining}: its connections are replaced as they age, and not one request fails`, async t => {
		const app = await startCluster(t, ['--max-connection-age', '1s', '--reject-period', '300ms'], fixture('app.mjs'), {workers: 2});
		const pool = new Pool(url(app.port), {connections: 4, pipelining});
		t.teardown(async () => pool.destroy());
		const ports = new Set<string>();
		let failures = 0;
		let served = 0;
		const until = performance.now() + 3000;
		await Promise.all(Array.from({length: 4}, async () => {
			while (performance.now() < until) {
				try {

					const response = await pool.request({path: '/pid', method: 'GET'});

					await response.body.text();
					if (response.statusCode === 200) {
						served++;
					} else {
						failures++;
					}

					ports.add(String(response.headers['connection'] ?? 'keep-alive'));
				} catch {
					failures++;
				}
			}
		}));
		t.is(failures, 0);
		t.true(served > 100, `${served} served`);
		t.true(ports.has('close'), 'some responses closed their connection for its age');
		app.kill('SIGTERM');
		t.is((await app.exited).code, 0, app.text());
		t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
	});
}

test('HTTP/2: a session past its age gets a GOAWAY that announces the close, then one naming its last stream; its streams finish; a stream refused in the notice\'s round trip is the only loss, and is safe to retry', async t => {
	const app = await startCluster(t, ['--max-connection-age', `${AGE_MS}ms`, '--reject-period', '300ms'], fixture('http2.mjs'), {workers: 1, env: {FIXTURE_SERVER: 'h2c'}});
	let session = connect(t, app.port);
	const first = session;
	// A long response under way as the session ages: it finishes.
	const slow = first.request(`/slow?ms=${AGE_MS + 800}`);
	let answered = 0;
	let refused = 0;
	const failures: unknown[] = [];
	const until = performance.now() + (AGE_MS * 2.5);
	while (performance.now() < until) {
		if (session.goaways.length > 0) {
			session = connect(t, app.port);
		}

		try {

			const response = await session.request('/');
			if (response.status === 200) {
				answered++;
			} else {
				failures.push(response.status);
			}
		} catch (error) {
			// Sent before this client read the notice: nghttp2 (Node's HTTP/2) takes no new
			// stream once it sent a GOAWAY, so the final one refuses it. RFC 9113 section 8.7:
			// never processed, safe to retry; the next round sends it on a new session.
			if ((error as {code?: string}).code === 'ERR_HTTP2_STREAM_ERROR' && String((error as Error).message).includes('REFUSED_STREAM')) {
				refused++;
			} else {
				failures.push(error);
			}
		}
	}

	t.deepEqual(failures, []);
	t.log(`${answered} answered, ${refused} refused (never processed: safe to retry)`);
	t.true(refused <= 2, `${refused} refused`);
	t.true(answered > 10, `${answered} answered`);
	const notice = await first.goaway(1);
	t.is(notice.lastStreamID, MAX_STREAM_ID, 'the first GOAWAY only announces');
	const final = await first.goaway(2);
	t.true(final.lastStreamID < MAX_STREAM_ID, 'the second names the last stream');
	t.is(notice.code, 0);
	t.is(final.code, 0);
	t.is((await slow).status, 200, 'the stream under way finished');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('WebSockets are left alone: an open one outlives the age and still echoes', async t => {
	const app = await startCluster(t, ['--max-connection-age', '1s', '--reject-period', '300ms'], fixture('long-lived.mjs'), {workers: 1});
	const socket = openWs(`ws://127.0.0.1:${app.port}/ws`);
	await socket.opened;
	t.is(await socket.echo('one'), 'one');
	// Time must pass: outliving its age is what is tested.
	await delay(1500);
	t.is(await socket.echo('two'), 'two', 'still open past its age');
	socket.ws.close();
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});
