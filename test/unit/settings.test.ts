import test from 'ava';
import {formatDuration, parseDuration} from '../../src/duration.js';
import {UsageError} from '../../src/errors.js';
import {logLevelFromEnv} from '../../src/worker-env.js';
import {
	DEFAULT_WORKER_SETTINGS, settingsFromEnv, workerSettingsFromEnv, workerSettingsToEnv,
} from '../../src/settings.js';
import {checkTimeline, DEFAULT_TIMELINE, remaining} from '../../src/timeline.js';
import {readWorkerEnv, replacementEnv, workerEnv} from '../../src/worker-env.js';

test('parseDuration reads what manifests write', t => {
	t.is(parseDuration('500ms'), 500);
	t.is(parseDuration('20s'), 20_000);
	t.is(parseDuration('2m'), 120_000);
	t.is(parseDuration('1h'), 3_600_000);
	t.is(parseDuration('90'), 90_000);
	t.is(parseDuration('1.5s'), 1500);
	t.is(parseDuration(' 0 '), 0);
	for (const bad of ['', 'banana', '-1', '5 s', '1d', 's', '1e3', 'Infinity']) {
		t.is(parseDuration(bad), undefined, bad);
	}
});

test('formatDuration prints seconds when whole', t => {
	t.is(formatDuration(90_000), '90s');
	t.is(formatDuration(1500), '1500ms');
});

test('worker settings survive the trip primary -> worker environment; the timeline does not take it', t => {
	const settings = {...DEFAULT_WORKER_SETTINGS, retryAfterSeconds: 9, readinessPath: '/ready', livenessPath: ''};
	const env = workerSettingsToEnv(settings);
	t.deepEqual(workerSettingsFromEnv(env), settings);
	t.false(Object.keys(env).some(key => /PERIOD/.test(key)), 'the timeline reaches a cluster worker in the drain message only');
});

test('standalone reads the whole timeline from its environment', t => {
	t.like(settingsFromEnv({GRACEFUL_CLUSTER_SERVE_PERIOD: '1s', GRACEFUL_CLUSTER_REJECT_PERIOD: '2s'}), {servePeriodMs: 1000, rejectPeriodMs: 2000, gracePeriodMs: DEFAULT_TIMELINE.gracePeriodMs});
});

test('remaining(): what is left of the timeline after some time, never below zero', t => {
	const timeline = {servePeriodMs: 2000, rejectPeriodMs: 5000, gracePeriodMs: 30_000};
	t.deepEqual(remaining(timeline, 0), timeline);
	t.deepEqual(remaining(timeline, 500), {servePeriodMs: 1500, rejectPeriodMs: 5000, gracePeriodMs: 29_500});
	t.deepEqual(remaining(timeline, 3000), {servePeriodMs: 0, rejectPeriodMs: 4000, gracePeriodMs: 27_000}, 'in the reject phase: its end stays where it was');
	t.deepEqual(remaining(timeline, 8000), {servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 22_000});
	t.deepEqual(remaining(timeline, 40_000), {servePeriodMs: 0, rejectPeriodMs: 0, gracePeriodMs: 0});
});

test('checkTimeline: serve + reject must end before the deadline', t => {
	t.notThrows(() => {
		checkTimeline(DEFAULT_TIMELINE);
	});
	t.throws(() => {
		checkTimeline({servePeriodMs: 5000, rejectPeriodMs: 5000, gracePeriodMs: 10_000});
	}, {instanceOf: UsageError, message: /--serve-period \(5s\) \+ --reject-period \(5s\) must be less than --grace-period \(10s\)/});
});

test('settingsFromEnv names the bad variable', t => {
	const error = t.throws(() => settingsFromEnv({GRACEFUL_CLUSTER_GRACE_PERIOD: 'never'}), {instanceOf: UsageError});
	t.regex(error?.message ?? '', /GRACEFUL_CLUSTER_GRACE_PERIOD.*"never"/);
	t.throws(() => settingsFromEnv({GRACEFUL_CLUSTER_REJECT_PERIOD: '95s'}), {message: /GRACEFUL_CLUSTER_SERVE_PERIOD \(0s\) \+ GRACEFUL_CLUSTER_REJECT_PERIOD \(95s\) must be less than GRACEFUL_CLUSTER_GRACE_PERIOD \(90s\)/}, 'standalone names the variables it read');
});

test('the worker helper refuses readiness and liveness on one path, as the CLI does (standalone mode included)', t => {
	const env = {GRACEFUL_CLUSTER_READINESS_PATH: '/health', GRACEFUL_CLUSTER_LIVENESS_PATH: '/health'};
	for (const read of [workerSettingsFromEnv, settingsFromEnv]) {
		const error = t.throws(() => read(env), {instanceOf: UsageError});
		t.regex(error?.message ?? '', /--readiness-path \(GRACEFUL_CLUSTER_READINESS_PATH\) and --liveness-path \(GRACEFUL_CLUSTER_LIVENESS_PATH\) are both "\/health".*Give them different paths/);
	}

	t.like(workerSettingsFromEnv({GRACEFUL_CLUSTER_READINESS_PATH: '', GRACEFUL_CLUSTER_LIVENESS_PATH: ''}), {readinessPath: '', livenessPath: ''});
});

test('the helper reads GRACEFUL_CLUSTER_LOG_LEVEL as a usage error when it is not a level', t => {
	t.is(logLevelFromEnv({}), 'info');
	t.is(logLevelFromEnv({GRACEFUL_CLUSTER_LOG_LEVEL: 'debug'}), 'debug');
	t.throws(() => logLevelFromEnv({GRACEFUL_CLUSTER_LOG_LEVEL: 'verbose'}), {instanceOf: UsageError, message: /GRACEFUL_CLUSTER_LOG_LEVEL: "verbose" is not a level/});
});

test('a worker reads back what the primary put in its environment: settings, log level, heartbeat, auto-attach, peer rates', t => {
	const settings = {...DEFAULT_WORKER_SETTINGS, retryAfterSeconds: 7, readinessPath: '/ready', keepAliveTimeoutMs: 1500};
	const env = workerEnv({settings, logLevel: 'debug', workerTimeoutMs: 4500, hungStack: true, adaptiveReject: false, autoAttach: false, listenTimeoutMs: 30_000});
	t.like(env, {GRACEFUL_CLUSTER_LOG_LEVEL: 'debug', GRACEFUL_CLUSTER_WORKER_TIMEOUT: '4500ms', GRACEFUL_CLUSTER_HUNG_STACK: 'on', GRACEFUL_CLUSTER_AUTO_ATTACH: 'off', GRACEFUL_CLUSTER_LISTEN_TIMEOUT: '30000ms', GRACEFUL_CLUSTER_KEEP_ALIVE_TIMEOUT: '1500ms', GRACEFUL_CLUSTER_PEER_RATES: 'off'});
	t.deepEqual(workerSettingsFromEnv(env), settings);
	t.deepEqual(readWorkerEnv(env), {logLevel: 'debug', heartbeat: {workerTimeoutMs: 4500, captureStack: true}, autoAttach: false, listenTimeoutMs: 30_000, replacement: false, peerRates: false});
	t.deepEqual(readWorkerEnv({...env, ...replacementEnv}).replacement, true, 'a replacement is told so for its fork only');
	t.deepEqual(readWorkerEnv({}), {logLevel: 'info', heartbeat: {workerTimeoutMs: 0, captureStack: false}, autoAttach: true, listenTimeoutMs: 0, replacement: false, peerRates: true}, 'nothing set: no watchdog; every HTTP server drained; the rates counted, for a primary that may read them');
	// The peers' rates are counted only for their readers: the adaptive reject period, /status.
	t.is(readWorkerEnv(workerEnv({settings, logLevel: 'info', workerTimeoutMs: 0, hungStack: false, adaptiveReject: true, autoAttach: true, listenTimeoutMs: 0})).peerRates, true);
	t.is(readWorkerEnv(workerEnv({settings, logLevel: 'info', workerTimeoutMs: 0, hungStack: false, adaptiveReject: false, autoAttach: true, listenTimeoutMs: 0, metrics: {port: 9464}})).peerRates, true);
});

test('--max-connection-age and --max-event-loop-delay: off by default, 0 turns them off, a value under their floor is a usage error that says why', t => {
	t.like(workerSettingsFromEnv({}), {maxConnectionAgeMs: 0, maxEventLoopDelayMs: 0});
	t.like(workerSettingsFromEnv({GRACEFUL_CLUSTER_MAX_CONNECTION_AGE: '5m', GRACEFUL_CLUSTER_MAX_EVENT_LOOP_DELAY: '200ms'}), {maxConnectionAgeMs: 300_000, maxEventLoopDelayMs: 200});
	t.like(workerSettingsFromEnv({GRACEFUL_CLUSTER_MAX_CONNECTION_AGE: '0', GRACEFUL_CLUSTER_MAX_EVENT_LOOP_DELAY: '0ms'}), {maxConnectionAgeMs: 0, maxEventLoopDelayMs: 0});
	t.throws(() => workerSettingsFromEnv({GRACEFUL_CLUSTER_MAX_CONNECTION_AGE: '1ms'}), {instanceOf: UsageError, message: /GRACEFUL_CLUSTER_MAX_CONNECTION_AGE.*"1ms" is shorter than 1000ms: every connection would close.*or 0 to turn it off/});
	t.throws(() => workerSettingsFromEnv({GRACEFUL_CLUSTER_MAX_EVENT_LOOP_DELAY: '5ms'}), {instanceOf: UsageError, message: /"5ms" is shorter than 10ms: a timer comes a few ms late at rest/});
	t.throws(() => workerSettingsFromEnv({GRACEFUL_CLUSTER_MAX_CONNECTION_AGE: '-1s'}), {instanceOf: UsageError, message: /cannot be negative/});
});
