// Pipelined requests across a drain and a reload: every request the app executed
// gets its response, and a request left unanswered (or answered 503) was never
// executed. Counted from both ends: the fixture's "fixture hit" lines against
// what the client received.
import test from 'ava';
import {Client} from 'undici';
import {fixture, startCluster, type LogLine, type Proc} from '../helpers/cluster.js';
import {RawConnection, type RawResponse} from '../helpers/http.js';

const hits = (app: Proc, prefix: string): string[] => app.lines
	.filter(line => line.msg === 'fixture hit' && String(line['id']).startsWith(prefix))
	.map(line => String(line['id']));

const posts = (prefix: string, count: number, ms: number): string => Array.from({length: count}, (_, i) =>
	`POST /hit?ms=${ms}&id=${prefix}${i} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody`).join('');

/** Every response until the server closes the connection. */
async function readAll(connection: RawConnection): Promise<RawResponse[]> {
	const responses: RawResponse[] = [];
	for (;;) {
		try {
			responses.push(await connection.readResponse());
		} catch (error) {
			if (/connection closed before a full response; got ""/.test(String(error))) {
				return responses;
			}

			throw error;
		}
	}
}

const isWorkerLine = (msg: string) => (line: LogLine) => line.role === 'worker' && line.msg === msg;

for (const phase of ['reject', 'serve'] as const) {
	test(`${phase} phase: a GET then 5 pipelined POSTs in flight at SIGTERM: every one the app executed is answered, the close comes last`, async t => {
		const options = phase === 'serve' ? ['--serve-period', '3s', '--reject-period', '1s'] : ['--reject-period', '3s'];
		const app = await startCluster(t, [...options, '--grace-period', '20s'], fixture('app.mjs'), {workers: 1});
		const connection = await RawConnection.open(app.port);
		t.teardown(() => {
			connection.close();
		});
		t.is((await connection.request('/')).body, 'hello');
		connection.socket.write(posts('p', 5, 1500));
		await app.waitForLog('fixture hit', {count: 5});
		app.kill('SIGTERM');
		const started = await app.waitForLog(isWorkerLine('drain started'));
		t.is(started['inflight'], 5, 'the POSTs were in flight when the drain began');

		// A new connection during the drain, pipelining 3 POSTs: only the first is
		// processed (served with close, or a 503 in the reject phase), the rest are
		// never executed and never answered.
		const late = await RawConnection.open(app.port);
		t.teardown(() => {
			late.close();
		});
		late.socket.write(posts('late', 3, 0));

		const responses = await readAll(connection);
		const executed = hits(app, 'p');
		t.deepEqual(responses.map(response => response.body), executed.map(id => `hit ${id}`), 'every executed POST answered, in order');
		t.is(executed.length, 5);
		t.deepEqual(responses.map(response => response.headers['connection']), ['keep-alive', 'keep-alive', 'keep-alive', 'keep-alive', 'close'], 'nothing after the close');

		const lateResponses = await readAll(late);
		t.is(lateResponses.length, 1);
		if (phase === 'serve') {
			t.deepEqual(hits(app, 'late'), ['late0']);
			t.is(lateResponses[0]!.body, 'hit late0');
		} else {
			t.deepEqual(hits(app, 'late'), []);
			t.is(lateResponses[0]!.status, 503);
		}

		t.is(lateResponses[0]!.headers['connection'], 'close');
		t.is((await app.exited).code, 0, app.text());
		const finished = app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished');
		t.like(finished, {outcome: 'clean', served: phase === 'serve' ? 6 : 5, rejected: phase === 'serve' ? 0 : 1});
	});
}

/** 8 GETs on one connection, pipelined; resolves once the app has executed all 8. */
async function pipelinedGets(t: import('ava').ExecutionContext, app: Proc & {port: number}, ms: number) {
	const client = new Client(`http://127.0.0.1:${app.port}`, {pipelining: 8});
	t.teardown(async () => {
		if (!client.destroyed) {
			await client.destroy();
		}
	});
	const ids = Array.from({length: 8}, (_, i) => `u${i}`);
	const results = Promise.all(ids.map(async id => {
		// `blocking: false`: undici's default for a GET waits for each response's
		// headers before sending the next request, which is no pipelining at all.
		const {statusCode, headers, body} = await client.request({method: 'GET', path: `/hit?ms=${ms}&id=${id}`, blocking: false});
		return {id, status: statusCode, retryAfter: headers['retry-after'], body: await body.text()};
	}));
	await app.waitForLog('fixture hit', {count: 8});
	return {ids, results, client};
}

test('undici pipelining 8 GETs in flight at SIGTERM: every executed request gets its 200, a 503 only for one the app never saw', async t => {
	const app = await startCluster(t, ['--reject-period', '3s', '--grace-period', '20s'], fixture('app.mjs'), {workers: 1});
	const {ids, results} = await pipelinedGets(t, app, 1500);
	app.kill('SIGTERM');
	t.is((await app.waitForLog(isWorkerLine('drain started')))['inflight'], 8);
	const answered = await results;
	const executed = hits(app, 'u');
	for (const result of answered) {
		if (result.status === 503) {
			t.false(executed.includes(result.id), `${result.id}: a 503 for a request the app executed`);
		} else {
			t.is(result.status, 200);
			t.is(result.body, `hit ${result.id}`);
		}
	}

	t.deepEqual(answered.filter(result => result.status === 200).map(result => result.id).sort(), [...executed].sort(), 'every executed request got its 200');
	t.deepEqual([...executed].sort(), ids, 'each executed once');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', served: 8});
});

test('undici pipelining 8 GETs in flight across a SIGHUP reload: none executed twice, none lost', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms', '--grace-period', '20s'], fixture('app.mjs'), {workers: 1});
	// Long enough for the replacement to start and the old worker to retire while they run.
	const {ids, results, client} = await pipelinedGets(t, app, 5000);
	app.kill('SIGHUP');
	const retiring = await app.waitForLog('retiring: replaced by a new worker', {timeout: 20_000});
	t.is(retiring['inflight'], 8, 'the GETs were in flight when the old worker retired');
	const answered = await results;
	t.deepEqual(answered.map(result => [result.id, result.status, result.body]), ids.map(id => [id, 200, `hit ${id}`]));
	t.deepEqual(hits(app, 'u').sort(), ids, 'each executed exactly once');
	await app.waitForLog('reload finished');
	// The client carries on, on a new connection to the new worker.
	const after = await client.request({method: 'GET', path: '/hit?id=after'});
	t.is(await after.body.text(), 'hit after');
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0, app.text());
});

test('a drain 503 queued behind a response still being written to a slow reader on the same keep-alive connection is delivered, then the close, and is counted in rejected', async t => {
	// No shutdown hook: the worker's summary is taken the moment the drain is done.
	const app = await startCluster(t, ['--reject-period', '400ms', '--grace-period', '20s'], fixture('app.mjs'), {workers: 1, env: {FIXTURE_NO_HOOKS: '1'}});
	const connection = await RawConnection.open(app.port);
	t.teardown(() => {
		connection.close();
	});
	// Its headers are out (keep-alive) before the signal; its 8 MB body comes
	// after the reject phase and fills the socket's buffers, so the drain goes
	// idle once the body is handed to the kernel, with the 503 behind it still
	// waiting to be written.
	connection.socket.write('GET /trickle?ms=1200&mb=8 HTTP/1.1\r\nHost: x\r\n\r\n');
	await app.waitForLog('fixture request started');
	app.kill('SIGTERM');
	await app.waitForLog(isWorkerLine('rejecting new requests'));
	connection.socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
	// About 4 MB/s.
	connection.socket.on('data', () => {
		connection.socket.pause();
		setTimeout(() => connection.socket.resume(), 15);
	});
	const responses = await readAll(connection);
	t.deepEqual(responses.map(response => response.status), [200, 503]);
	t.is(responses[0]!.body.length, 5 + (8 * 1024 * 1024));
	t.is(responses[1]!.headers['connection'], 'close');
	t.is(await connection.closedByServer(), 'fin');
	t.is((await app.exited).code, 0, app.text());
	t.like(app.lines.find(line => line.msg === 'drain finished'), {outcome: 'clean', served: 1, rejected: 1, aborted: 0});
	t.like(app.lines.find(isWorkerLine('worker drained')), {served: 1, rejected: 1});
});
