// The primary's watchdog (hung workers) and recycling policy with fake workers
// and a fake clock (test/helpers/fakes.ts): exact, without processes or sleeps.
import test from 'ava';
import {ExitCode} from '../../src/exit-codes.js';
import {Fleet} from '../../src/primary/fleet.js';
import {RETIRE_LINGER_MS} from '../../src/primary/index.js';
import type {PrimaryOptions} from '../../src/primary/options.js';
import {MEMORY_BEATS, Recycler, RETRY_AFTER_MS} from '../../src/primary/recycle.js';
import {findStack} from '../../src/primary/watchdog.js';
import {Replacer} from '../../src/primary/reload.js';
import {Supervisor} from '../../src/primary/supervisor.js';
import {TimerGroup} from '../../src/clock.js';
import {HUNG_STACK_MESSAGE, parseMessage, envelope, type ToPrimary} from '../../src/protocol.js';
import {DEFAULT_SETTINGS} from '../../src/settings.js';
import {captureAfter, heartbeatOptionsFromEnv} from '../../src/worker/heartbeat.js';
import {parseSize} from '../../src/values.js';
import {UsageError} from '../../src/errors.js';
import {parseOptions} from '../helpers/args.js';
import {captureLogger, FAKE_TIMELINE, fakeEdges, fakePrimary, flush} from '../helpers/fakes.js';

const TIMELINE = FAKE_TIMELINE;
const TIMEOUT = 5000;

const primary = (overrides: Partial<PrimaryOptions> = {}) => {
	const p = fakePrimary({workerTimeoutMs: TIMEOUT, ...overrides});
	return Object.assign(p, {
		/** The fleet's records, as metrics will read them. */
		records: () => (p.primary as unknown as {fleet: Fleet}).fleet.alive,
	});
};

const HUNG = 'worker hung: its event loop was silent longer than --worker-timeout; killing it';

test('protocol: a heartbeat is ours with non-negative integer fields; a negative count is invalid', t => {
	const beat: ToPrimary = {type: 'heartbeat', rssBytes: 50_000_000, heapUsedBytes: 9_000_000, loopDelayMs: 12, requests: 3, inflight: 1};
	t.deepEqual(parseMessage(envelope(beat), ['heartbeat']), {kind: 'ours', message: {v: 1, ...beat}});
	t.like(parseMessage(envelope({...beat, loopDelayMs: -1}), ['heartbeat']), {kind: 'invalid'});
});

test('watchdog: each heartbeat counts as a sign of life from the moment it is received', t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.clock.advance(1500);
	a!.beat({rssBytes: 1, heapUsedBytes: 2, loopDelayMs: 3, requests: 4, inflight: 5});
	t.like(p.lines.find(line => line.msg === 'worker started'), {reason: 'initial'});
	t.deepEqual(p.records()[0]!.health, {at: 1500, rssBytes: 1, heapUsedBytes: 2, loopDelayMs: 3, requests: 4, inflight: 5, connectionsAged: 0});
	p.clock.advance(TIMEOUT - 500);
	t.deepEqual(a!.signals, [], 'its heartbeat at 1.5 s restarted the count: silent 4.5 s at the 6 s check');
	p.clock.advance(1000);
	t.deepEqual(a!.signals, ['SIGKILL']);
});

test('watchdog: a listening worker silent for --worker-timeout is SIGKILLed, logged, and restarted with reason hung', t => {
	const p = primary();
	const [a, b] = p.serveAll();
	p.run(3000, [a!, b!], {inflight: 2, loopDelayMs: 7});
	// `a` stops beating (its loop blocked); `b` goes on.
	// Its last heartbeat came at 2 s.
	p.run(TIMEOUT - 2000, [b!]);
	t.deepEqual(a!.signals, [], 'silent 4 s of 5');
	p.run(1000, [b!]);
	t.deepEqual(a!.signals, ['SIGKILL']);
	t.deepEqual(b!.signals, []);
	t.like(p.line(HUNG), {worker: a!.id, silentMs: TIMEOUT, inflight: 2, loopDelayMs: 7, stack: null, workerTimeoutMs: TIMEOUT});
	a!.exit(null, 'SIGKILL');
	t.like(p.line('worker exited'), {worker: a!.id, killedFor: 'hung', reason: 'hung'});
	t.like(p.line('restarting worker'), {reason: 'hung', delayMs: 100});
	p.clock.advance(100);
	t.like(p.all('worker started').at(-1), {slot: a!.id - 1, reason: 'hung'});
	t.is(p.cluster.workers.length, 3);
});

test('watchdog: a worker not yet listening is not judged (--listen-timeout is its timeout)', t => {
	const p = primary({workers: 1, listenTimeoutMs: 60_000});
	p.clock.advance(TIMEOUT * 4);
	t.deepEqual(p.cluster.workers[0]!.signals, []);
	t.falsy(p.line(HUNG));
});

test('watchdog: a worker listening without a heartbeat yet is counted from when it listened', t => {
	const p = primary({workers: 1, listenTimeoutMs: 60_000});
	p.clock.advance(20_000);
	const [a] = p.serveAll();
	p.clock.advance(TIMEOUT - 1000);
	t.deepEqual(a!.signals, []);
	p.clock.advance(1000);
	t.deepEqual(a!.signals, ['SIGKILL']);
});

test('watchdog: a busy worker that keeps beating is never killed; --worker-timeout 0 turns it off', t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.run(60_000, [a!], {loopDelayMs: 900});
	t.deepEqual(a!.signals, []);
	const off = primary({workers: 1, workerTimeoutMs: 0});
	const [c] = off.serveAll();
	off.clock.advance(600_000);
	t.deepEqual(c!.signals, []);
});

test('watchdog: a stall of the primary\'s own loop starts every count over instead of killing', t => {
	const p = primary({workers: 1});
	const [a] = p.serveAll();
	p.run(2000, [a!]);
	// Time jumps as on a suspended host: the next check runs a minute late.
	const now = p.clock.now.bind(p.clock);
	let jump = 0;
	p.clock.now = () => now() + jump;
	jump = 60_000;
	p.clock.advance(1000);
	t.deepEqual(a!.signals, []);
	t.truthy(p.line('the primary\'s own event loop was stalled; the watchdog starts its count over'));
	p.run(3000, [a!]);
	t.deepEqual(a!.signals, []);
});

test('watchdog: during a drain a hung worker is killed at --worker-timeout; the drain lists it as lost, killedFor hung', async t => {
	const p = primary({settings: {...DEFAULT_SETTINGS, ...TIMELINE, gracePeriodMs: 60_000}});
	const [a, b] = p.serveAll();
	p.run(2000, [a!, b!], {inflight: 1});
	p.edges.signal('SIGTERM');
	b!.drained().exit(0);
	p.clock.advance(TIMEOUT);
	t.deepEqual(a!.signals, ['SIGKILL']);
	a!.exit(null, 'SIGKILL');
	t.is(await p.done, ExitCode.WORKER_LOST);
	t.like(p.line('drain finished'), {outcome: 'forced', lost: [{worker: a!.id, killedFor: 'hung'}]});
	t.is(p.cluster.workers.length, 2, 'no restart during a drain');
});

test('watchdog: a worker disconnected by the drain (no attach()) cannot beat: left to the deadline, not killed as hung', t => {
	const p = primary({workers: 1, settings: {...DEFAULT_SETTINGS, ...TIMELINE, gracePeriodMs: 60_000}});
	const [a] = p.cluster.workers;
	a!.listen();
	p.run(1000, [a!]);
	p.edges.signal('SIGTERM');
	p.run(TIMELINE.servePeriodMs + TIMELINE.rejectPeriodMs, [a!]);
	t.is(a!.disconnectCalls, 1);
	a!.connected = false;
	p.clock.advance(TIMEOUT * 4);
	t.deepEqual(a!.signals, []);
	t.falsy(p.line(HUNG));
});

test('watchdog: the stack the worker\'s capture thread wrote to stderr is found, the latest first', t => {
	const line = (stack: string[]) => JSON.stringify({level: 'error', stack, msg: HUNG_STACK_MESSAGE});
	t.deepEqual(findStack(['plain text', line(['old (a.js:1:1)']), `${HUNG_STACK_MESSAGE} not json`, line(['spinForever (app.js:3:5)'])]), {stack: ['spinForever (app.js:3:5)']});
	t.is(findStack(['nothing here']), undefined);
	t.is(captureAfter(30_000), 28_000, 'two seconds before the kill');
	t.is(captureAfter(3000), 1500);
});

test('recycle: a worker past --max-requests is replaced new-first: the new one listens, then the old one retires', t => {
	const p = primary({maxRequests: 100});
	const [a, b] = p.serveAll();
	p.run(1000, [a!, b!], {requests: 99});
	t.is(p.cluster.workers.length, 2);
	a!.beat({requests: 100});
	t.like(p.line('recycling worker: a new one starts, then this one retires'), {worker: a!.id, reason: 'requests', requests: 100, maxRequests: 100});
	const candidate = p.cluster.workers[2]!;
	t.like(p.all('worker started').at(-1), {slot: 0, reason: 'requests', workerRole: 'candidate'});
	t.deepEqual(a!.received, [], 'the old one serves until its replacement listens');
	a!.beat({requests: 150});
	t.is(p.cluster.workers.length, 3, 'one replacement per slot at a time');
	candidate.attach().listen();
	return flush().then(() => {
		t.deepEqual(a!.received, [{v: 1, type: 'retire', lingerMs: RETIRE_LINGER_MS}], 'a recycle: no signal');
		t.like(p.line('worker replaced'), {slot: 0, worker: candidate.id, replaced: a!.id, reason: 'requests'});
		a!.drained().exit(0);
		t.like(p.all('worker exited').at(-1), {worker: a!.id, reason: 'requests', workerRole: 'retiring'});
		t.is(p.cluster.live.length, 2, 'never below the configured count, and no restart for a planned exit');
	});
});

test('recycle: the same readiness gate as a reload: the old worker retires only once its warming replacement is ready', async t => {
	const p = primary({maxRequests: 100});
	const [a, b] = p.serveAll();
	p.run(1000, [a!, b!], {requests: 100});
	const candidate = p.cluster.workers[2]!;
	t.is(candidate.env['GRACEFUL_CLUSTER_REPLACEMENT'], 'on');
	candidate.say({type: 'attached', warming: true}).listen();
	await flush();
	t.deepEqual(a!.received, [], 'listening, not ready: the old one keeps serving');
	candidate.say({type: 'ready'});
	await flush();
	t.deepEqual(a!.types, ['retire']);
	t.like(p.line('worker replaced'), {worker: candidate.id, reason: 'requests', warmedUp: true});
});

test('recycle: a drain that starts while the new worker is starting completes nothing: no retire, the drain takes both', async t => {
	const p = primary({maxRequests: 100});
	const [a, b] = p.serveAll();
	p.run(1000, [a!, b!], {requests: 100});
	const candidate = p.cluster.workers[2]!;
	p.edges.signal('SIGTERM');
	candidate.attach().listen();
	await flush();
	t.deepEqual(a!.types, ['drain'], 'drained, not retired');
	t.falsy(p.line('worker replaced'));
	a!.drained().exit(0);
	t.like(p.all('worker exited').at(-1), {worker: a!.id, reason: 'drain'});
});

test('recycle: RSS must stay above --max-memory-restart for several heartbeats; a spike is not enough', async t => {
	const p = primary({workers: 1, maxMemoryBytes: 300 * 1024 * 1024});
	const [a] = p.serveAll();
	const high = {rssBytes: 400 * 1024 * 1024};
	a!.beat(high).beat(high).beat({rssBytes: 100}).beat(high);
	t.is(p.cluster.workers.length, 1, 'a spike the GC took back');
	for (let i = 1; i < MEMORY_BEATS; i++) {
		a!.beat(high);
	}

	t.is(p.cluster.workers.length, 2);
	t.like(p.line('recycling worker: a new one starts, then this one retires'), {reason: 'memory', rssBytes: high.rssBytes, maxMemoryBytes: 300 * 1024 * 1024});
	p.cluster.workers[1]!.attach().listen();
	await flush();
	t.deepEqual(a!.types, ['retire']);
});

test('recycle: never a second retiring worker in one slot; waits for the first to be gone', async t => {
	const p = primary({workers: 1, maxRequests: 10});
	const [a] = p.serveAll();
	a!.beat({requests: 10});
	const b = p.cluster.workers[1]!;
	b.attach().listen();
	await flush();
	t.deepEqual(a!.types, ['retire']);
	b.beat({requests: 10});
	t.is(p.cluster.workers.length, 2, 'the old one of this slot is still retiring');
	a!.drained().exit(0);
	b.beat({requests: 11});
	t.is(p.cluster.workers.length, 3);
});

test('recycle: not during a reload nor a drain', t => {
	const p = primary({maxRequests: 10});
	const [a] = p.serveAll();
	p.edges.signal('SIGHUP');
	const forked = p.cluster.workers.length;
	a!.beat({requests: 50});
	t.is(p.cluster.workers.length, forked);
	const q = primary({maxRequests: 10});
	const [c] = q.serveAll();
	q.edges.signal('SIGTERM');
	c!.beat({requests: 50});
	t.is(q.cluster.workers.length, 2);
});

test('recycle: a replacement that fails to start leaves the old one serving, judged again after a pause', async t => {
	const p = primary({workers: 1, maxRequests: 10, workerTimeoutMs: 0});
	const [a] = p.serveAll();
	a!.beat({requests: 10});
	p.cluster.workers[1]!.exit(1);
	await flush();
	t.truthy(p.line('recycling failed: the new worker did not start or was not ready in time; the old one keeps serving'));
	t.deepEqual(a!.received, []);
	a!.beat({requests: 11});
	t.is(p.cluster.workers.length, 2, 'cooling');
	p.clock.advance(RETRY_AFTER_MS);
	a!.beat({requests: 12});
	t.is(p.cluster.workers.length, 3);
});

test('recycle: each worker draws its own limit in max-requests + 0..jitter', t => {
	const edges = fakeEdges();
	const {logger} = captureLogger();
	const sink = {write() {}};
	const fleet = new Fleet({script: '/a.js', args: [], execArgv: [], env: {}, logger, stdout: sink, stderr: sink}, edges);
	const supervisor = new Supervisor(fleet, {count: 3, listenTimeoutMs: 0, maxStartFailures: 3, restartDelayMs: 1, maxRestartDelayMs: 1, backoffResetMs: 1}, edges.clock, logger, () => {});
	const replacer = new Replacer({fleet, supervisor, logger, timers: new TimerGroup(edges.clock), lingerMs: 0, deadlineMs: 1000, listenTimeoutMs: 0, shutdown: new AbortController().signal});
	const draws = [0, 0.999, 0.5];
	const recycler = new Recycler(fleet, replacer, {maxMemoryBytes: 0, maxRequests: 1000, maxRequestsJitter: 100}, edges.clock, logger, () => true, () => draws.shift()!);
	supervisor.start();
	t.deepEqual(fleet.alive.map(record => recycler.limitOf(record)), [1000, 1100, 1050]);
});

const parse = (argv: string[], env: Record<string, string> = {}) => parseOptions([...argv, 'examples/hello/server.js'], env);

test('options: defaults, flags, GRACEFUL_CLUSTER_* variables, and what each refuses', t => {
	t.like(parse([]), {workerTimeoutMs: 30_000, hungStack: false, maxMemoryBytes: 0, maxRequests: 0, maxRequestsJitter: 0});
	t.is(parse([]).settings.checkTimeoutMs, 2000);
	t.like(parse(['--worker-timeout', '0', '--hung-stack', 'on', '--max-memory-restart', '300M', '--max-requests', '1000', '--max-requests-jitter', '50', '--check-timeout', '500ms']), {
		workerTimeoutMs: 0, hungStack: true, maxMemoryBytes: 300 * 1024 * 1024, maxRequests: 1000, maxRequestsJitter: 50,
	});
	t.like(parse([], {GRACEFUL_CLUSTER_WORKER_TIMEOUT: '1m', GRACEFUL_CLUSTER_MAX_MEMORY_RESTART: '1G', GRACEFUL_CLUSTER_MAX_REQUESTS: '7'}), {workerTimeoutMs: 60_000, maxMemoryBytes: 1024 ** 3, maxRequests: 7});
	t.is(parseSize('max-memory-restart', '32768K'), 32 * 1024 ** 2);
	t.is(parseSize('max-memory-restart', '33554432'), 32 * 1024 ** 2);
	t.is(parseSize('max-memory-restart', '1.5g'), 1.5 * 1024 ** 3);
	t.is(parseSize('max-memory-restart', '0'), 0, 'off');
	t.throws(() => parseSize('max-memory-restart', '10'), {instanceOf: UsageError, message: /"10" is below 32M, less than a Node.js worker uses at rest/});
	t.throws(() => parse(['--check-timeout', '0']), {instanceOf: UsageError, message: /--check-timeout \(GRACEFUL_CLUSTER_CHECK_TIMEOUT\): "0" would fail every check at once/});
	t.throws(() => parse(['--worker-timeout', '2s']), {instanceOf: UsageError, message: /shorter than 3s/});
	t.throws(() => parse(['--max-memory-restart', 'lots']), {instanceOf: UsageError, message: /--max-memory-restart \(GRACEFUL_CLUSTER_MAX_MEMORY_RESTART\): "lots" is not a size/});
	t.throws(() => parse(['--max-requests', '-1']), {instanceOf: UsageError});
	t.throws(() => parse(['--hung-stack', 'yes']), {instanceOf: UsageError, message: /neither on nor off/});
});

test('worker side: the heartbeat\'s settings come from the environment the primary sets', t => {
	t.deepEqual(heartbeatOptionsFromEnv({GRACEFUL_CLUSTER_WORKER_TIMEOUT: '30000ms', GRACEFUL_CLUSTER_HUNG_STACK: 'on'}), {workerTimeoutMs: 30_000, captureStack: true});
	t.deepEqual(heartbeatOptionsFromEnv({}), {workerTimeoutMs: 0, captureStack: false});
	const p = primary({workerTimeoutMs: 10_000, hungStack: true});
	t.like(p.cluster.workers[0]!.env, {GRACEFUL_CLUSTER_WORKER_TIMEOUT: '10000ms', GRACEFUL_CLUSTER_HUNG_STACK: 'on', GRACEFUL_CLUSTER_CHECK_TIMEOUT: '2000ms'});
});
