// --max-event-loop-delay end to end: the real CLI, one worker whose requests each burn
// 20 ms of CPU, driven over capacity by 40 keep-alive clients. Shed requests get 503 +
// Retry-After, the connection kept; served ones all complete; one warning per episode;
// /metrics and /status show it; a drain while shedding keeps its own rules.
import test from 'ava';
import {freePort, url} from '../../testkit/net.js';
import {eventually} from '../../testkit/proc.js';
import {fixture, startCluster, type LogLine} from '../helpers/cluster.js';
import {client} from '../helpers/http.js';
import {steadyLoad, type LoadOutcome} from '../helpers/load.js';

const APP = fixture('busy.mjs');
const SHED_START = 'shedding new requests: the event loop lags more than --max-event-loop-delay';

/** `clients` keep-alive clients in a loop until stopped (busy.mjs's `/` burns CPU): every outcome recorded. */
const overload = (port: number, clients = 40) => steadyLoad(port, {clients, path: '/', maxMs: 60_000, maxRequests: 1_000_000, timeoutMs: 20_000});

const workerLines = (lines: LogLine[], msg: string): LogLine[] => lines.filter(line => line.role === 'worker' && line.msg === msg);

test('over capacity, one worker sheds: 503 + Retry-After on a kept connection, served ones all 200; one warning per episode; /livez, /readyz, /metrics, /status', async t => {
	const metricsPort = await freePort();
	const app = await startCluster(t, ['--max-event-loop-delay', '100ms', '--metrics', `127.0.0.1:${metricsPort}`, '--retry-after', '2', '--reject-period', '300ms'], APP, {workers: 1});
	const load = overload(app.port);
	await app.waitForLog(SHED_START);
	t.is((await client(url(app.port, '/livez'))).statusCode, 200, 'a shedding worker is alive');
	// One worker: when it sheds, every worker does, and the pod is not ready.
	let notReady: {statusCode: number; body: string} | undefined;
	await eventually(async () => {
		const response = await client(url(app.port, '/readyz'));
		if (response.statusCode === 503) {
			notReady = response;
		}

		return notReady !== undefined;
	}, {timeout: 10_000, interval: 20});
	t.is(notReady?.body, 'overloaded\n');
	await app.waitForLog('stopped shedding');
	await load.stop();
	// The loop recovers once the load is gone: the open episode ends.
	const ends = workerLines(app.lines, 'stopped shedding');
	await eventually(() => workerLines(app.lines, SHED_START).length === workerLines(app.lines, 'stopped shedding').length, {timeout: 5000});

	const {results} = load;
	const errors = results.filter(result => 'error' in result);
	t.deepEqual(errors, [], 'no request failed');
	const answered = results.filter((result): result is Exclude<LoadOutcome, {error: string}> => !('error' in result));
	const shed = answered.filter(result => result.status === 503);
	const served = answered.filter(result => result.status !== 503);
	t.true(shed.length > 0, 'some were shed');
	t.true(served.length > shed.length / 10, `most of the throughput kept: ${served.length} served, ${shed.length} shed`);
	t.true(served.every(result => result.status === 200));
	const p99 = (outcomes: typeof served): number => Math.round(outcomes.map(result => result.ms).sort((a, b) => a - b)[Math.floor(outcomes.length * 0.99)] ?? 0);
	t.log(`${served.length} served (p99 ${p99(served)} ms), ${shed.length} shed (p99 ${p99(shed)} ms)`);
	t.true(shed.every(result => result.retryAfter === '2' && result.connection === 'keep-alive'), 'a close would send every shed client back through the hand-off to this busy worker');

	// Once per episode: the warnings and the ends alternate.
	const sequence = app.lines.filter(line => line.role === 'worker' && (line.msg === SHED_START || line.msg === 'stopped shedding')).map(line => line.msg);
	t.true(sequence.every((msg, index) => msg === (index % 2 === 0 ? SHED_START : 'stopped shedding')), sequence.join(' / '));
	t.like(workerLines(app.lines, SHED_START)[0], {level: 'warn', maxEventLoopDelayMs: 100});
	t.true(Number(workerLines(app.lines, SHED_START)[0]!['loopDelayMs']) > 100);
	t.true(ends.length > 0);
	const counted = workerLines(app.lines, 'stopped shedding').reduce((sum, line) => sum + Number(line['shed']), 0);
	t.is(counted, shed.length, 'the episodes\' counts add up to the 503s the clients got');

	// The heartbeat carries the totals to the primary.
	let text = '';
	await eventually(async () => {
		text = (await client(url(metricsPort, '/metrics'))).body;
		return new RegExp(`^graceful_cluster_requests_shed_total ${shed.length}$`, 'm').test(text) && /^graceful_cluster_workers_shedding 0$/m.test(text);
	}, {timeout: 5000});
	t.regex(text, new RegExp(`^graceful_cluster_requests_shed_total ${shed.length}$`, 'm'));
	const seconds = /^graceful_cluster_shedding_seconds_total (\S+)$/m.exec(text);
	t.true(Number(seconds?.[1]) > 0, `shedding seconds: ${seconds?.[1]}`);
	t.regex(text, /^graceful_cluster_workers_shedding 0$/m);
	const status = JSON.parse((await client(url(metricsPort, '/status'))).body) as {workers: Array<{shed: number; shedding: boolean}>};
	t.like(status.workers[0], {shed: shed.length}, JSON.stringify(status.workers[0]));
	t.is(typeof status.workers[0]?.shedding, 'boolean');

	// Recovered: served, and ready.
	await eventually(async () => (await client(url(app.port, '/'))).statusCode === 200, {timeout: 5000});
	await eventually(async () => (await client(url(app.port, '/readyz'))).statusCode === 200, {timeout: 5000});
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('without the option, the same load gets no 503 at all', async t => {
	const app = await startCluster(t, ['--reject-period', '300ms'], APP, {workers: 1});
	const load = overload(app.port);
	await eventually(() => load.results.length >= 300, {timeout: 20_000});
	await load.stop();
	t.deepEqual(load.results.filter(result => 'error' in result || result.status !== 200), []);
	t.is(app.lines.filter(line => line.msg === SHED_START).length, 0);
	app.kill('SIGTERM');
	t.is((await app.exited).code, 0);
});

test('a drain while shedding: the drain\'s rules apply; the request in flight finishes, exit 0, the drain finished clean', async t => {
	// A reject phase long enough for the load's last requests: what happens to a request
	// sent as the drain closes idle connections is the drain's tests' business.
	const app = await startCluster(t, ['--max-event-loop-delay', '100ms', '--serve-period', '0', '--reject-period', '4s'], APP, {workers: 1});
	const slow = client(url(app.port, '/slow?ms=2500'));
	// Awaited below; a failed assertion before that must not leave it unhandled.
	slow.catch(() => undefined);
	await app.waitForLog('fixture request started');
	const load = overload(app.port);
	await app.waitForLog(SHED_START);
	app.kill('SIGTERM');
	await app.waitForLog(line => line.role === 'worker' && line.msg === 'drain started');
	await load.stop();
	t.deepEqual(load.results.filter(result => 'error' in result), [], 'no request failed');
	const answered = load.results.filter((result): result is Exclude<LoadOutcome, {error: string}> => !('error' in result));
	// The shed 503 keeps its connection, the drain's closes it: each 503 is one or the other.
	const shed = answered.filter(result => result.status === 503 && result.connection === 'keep-alive');
	t.true(answered.every(result => result.status === 200 || (result.status === 503 && (result.connection === 'close' || result.connection === 'keep-alive'))));
	const inflight = await slow;
	t.is(inflight.statusCode, 200);
	t.is(inflight.body, 'slow');
	const exit = await app.exited;
	t.is(exit.code, 0, app.text());
	t.like(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished'), {outcome: 'clean', exitCode: 0});
	// An episode open at the drain's start ends there, saying so; none starts after.
	const afterDrain = app.lines.slice(app.lines.findIndex(line => line.role === 'worker' && line.msg === 'drain started'));
	t.is(afterDrain.filter(line => line.msg === SHED_START).length, 0);
	const sequence = app.lines.filter(line => line.role === 'worker' && (line.msg === SHED_START || line.msg === 'stopped shedding'));
	t.is(sequence.at(-1)?.msg, 'stopped shedding', 'every episode has its end line');
	// Every shed 503 the clients got was counted in an episode that ended by the drain's start.
	t.is(sequence.filter(line => line.msg === 'stopped shedding').reduce((sum, line) => sum + Number(line['shed']), 0), shed.length);
	const drainEnd = sequence.find(line => line['endedBy'] === 'drain');
	if (drainEnd !== undefined) {
		t.true(app.lines.indexOf(drainEnd) > app.lines.findIndex(line => line.role === 'worker' && line.msg === 'drain started') - 2);
	}

	t.is(app.lines.find(line => line.role === 'primary' && line.msg === 'drain finished')?.['responsesCut'], 0);
});
