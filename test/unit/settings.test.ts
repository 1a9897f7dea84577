import test from 'ava';
import {formatDuration, parseDuration} from '../../src/duration.js';
import {UsageError} from '../../src/errors.js';
import {DEFAULT_SETTINGS, settingsFromEnv, settingsToEnv} from '../../src/settings.js';

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

test('settings survive the trip primary -> worker environment', t => {
	const settings = {...DEFAULT_SETTINGS, servePeriodMs: 1234, readinessPath: '/ready', livenessPath: ''};
	t.deepEqual(settingsFromEnv(settingsToEnv(settings)), settings);
});

test('settingsFromEnv names the bad variable', t => {
	const error = t.throws(() => settingsFromEnv({GRACEFUL_CLUSTER_GRACE_PERIOD: 'never'}), {instanceOf: UsageError});
	t.regex(error?.message ?? '', /GRACEFUL_CLUSTER_GRACE_PERIOD.*"never"/);
	t.throws(() => settingsFromEnv({GRACEFUL_CLUSTER_REJECT_PERIOD: '95s'}), {message: /must be less than --grace-period/});
});
