// Option parsing, on plain arrays (and process.env, which yargs' .env() reads).
import test from 'ava';
import path from 'node:path';
import {parseArgs} from '../../src/args.js';
import {UsageError} from '../../src/errors.js';
import {ROOT} from '../helpers/cluster.js';

const script = 'examples/hello/server.js';

function run(argv: string[], env: Record<string, string> = {}) {
	const saved = {...process.env};
	for (const key of Object.keys(process.env)) {
		if (key.startsWith('GRACEFUL_CLUSTER_')) {
			delete process.env[key];
		}
	}

	Object.assign(process.env, env);
	try {
		const result = parseArgs(argv, ROOT);
		if (result.kind !== 'run') {
			throw new Error('expected options');
		}

		return result.options;
	} finally {
		for (const key of Object.keys(env)) {
			delete process.env[key];
		}

		Object.assign(process.env, saved);
	}
}

function usageError(t: import('ava').ExecutionContext, argv: string[], pattern: RegExp, env: Record<string, string> = {}) {
	const error = t.throws(() => run(argv, env), {instanceOf: UsageError});
	t.regex(error?.message ?? '', pattern);
}

test.serial('defaults: the 20 s / 90 s timeline, probes, one worker per usable CPU', t => {
	const options = run([script]);
	t.is(options.script, path.join(ROOT, script));
	t.deepEqual(options.args, []);
	t.like(options.settings, {servePeriodMs: 0, rejectPeriodMs: 20_000, gracePeriodMs: 90_000, retryAfterSeconds: 1, readinessPath: '/readyz', livenessPath: '/livez', keepAliveTimeoutMs: 65_000});
	t.true(options.workers >= 1);
	t.is(options.logLevel, 'info');
});

test.serial('options before the script; everything after it goes to the app untouched', t => {
	const options = run(['-w', '3', '--reject-period', '5s', script, '--port', '3000', '-w', '1', '--grace-period', 'x']);
	t.is(options.workers, 3);
	t.is(options.settings.rejectPeriodMs, 5000);
	t.deepEqual(options.args, ['--port', '3000', '-w', '1', '--grace-period', 'x']);
});

test.serial('durations: ms, s, m and bare seconds', t => {
	const options = run(['--serve-period', '1500ms', '--reject-period', '2m', '--grace-period', '300', script]);
	t.like(options.settings, {servePeriodMs: 1500, rejectPeriodMs: 120_000, gracePeriodMs: 300_000});
});

test.serial('GRACEFUL_CLUSTER_* variables set options, and flags win over them', t => {
	const env = {GRACEFUL_CLUSTER_REJECT_PERIOD: '7s', GRACEFUL_CLUSTER_WORKERS: '2', GRACEFUL_CLUSTER_RETRY_AFTER: '5'};
	const fromEnv = run([script], env);
	t.like(fromEnv.settings, {rejectPeriodMs: 7000, retryAfterSeconds: 5});
	t.is(fromEnv.workers, 2);
	const flagWins = run(['--reject-period', '3s', script], env);
	t.is(flagWins.settings.rejectPeriodMs, 3000);
});

test.serial('bad input is a UsageError that names the flag and says what to do', t => {
	usageError(t, ['--bogus', script], /Unknown argument: bogus.*--help/s);
	usageError(t, ['--workers', 'abc', script], /--workers.*"abc".*whole number/);
	usageError(t, ['--workers', '0', script], /--workers.*whole number from 1/);
	usageError(t, ['--grace-period', 'banana', script], /--grace-period \(GRACEFUL_CLUSTER_GRACE_PERIOD\): "banana" is not a duration/);
	usageError(t, ['--listen-timeout', '1000h', script], /--listen-timeout.*longer than 24 days/);
	usageError(t, ['--reject-period=-1s', script], /--reject-period.*not a duration/);
	usageError(t, ['--serve-period', '30s', '--reject-period', '60s', script], /must be less than --grace-period \(90s\)/);
	usageError(t, ['--retry-after', '1.5', script], /--retry-after.*whole number/);
	usageError(t, ['--readiness-path', 'readyz', script], /--readiness-path.*not a request path/);
	usageError(t, ['--log-level', 'loud', script], /--log-level.*one of/);
	usageError(t, [], /No script given/);
	usageError(t, ['./missing.js'], /Script not found: \.\/missing\.js/);
	usageError(t, ['examples'], /Script not found/);
	usageError(t, [script], /GRACEFUL_CLUSTER_REJECT_PERIOD.*"soon"/, {GRACEFUL_CLUSTER_REJECT_PERIOD: 'soon'});
	usageError(t, [script], /Unknown environment variable GRACEFUL_CLUSTER_REJECT_PERIODS/, {GRACEFUL_CLUSTER_REJECT_PERIODS: '5s'});
	usageError(t, ['-x', script], /Unknown argument: x\. Options go before the script/);
});

test.serial('Kubernetes service-link variables of a Service named graceful-cluster are not options', t => {
	const env = {
		GRACEFUL_CLUSTER_SERVICE_HOST: '10.0.0.1',
		GRACEFUL_CLUSTER_SERVICE_PORT: '80',
		GRACEFUL_CLUSTER_SERVICE_PORT_HTTP: '80',
		GRACEFUL_CLUSTER_PORT: 'tcp://10.0.0.1:80',
		GRACEFUL_CLUSTER_PORT_80_TCP: 'tcp://10.0.0.1:80',
		GRACEFUL_CLUSTER_PORT_80_TCP_PROTO: 'tcp',
		GRACEFUL_CLUSTER_PORT_80_TCP_PORT: '80',
		GRACEFUL_CLUSTER_PORT_80_TCP_ADDR: '10.0.0.1',
		GRACEFUL_CLUSTER_API_SERVICE_HOST: '10.0.0.2',
		GRACEFUL_CLUSTER_REJECT_PERIOD: '4s',
	};
	t.is(run([script], env).settings.rejectPeriodMs, 4000);
	t.is(process.env['GRACEFUL_CLUSTER_SERVICE_HOST'], undefined, 'restored as it was');
});

test.serial('an empty probe path turns the probe off', t => {
	t.is(run(['--liveness-path', '', script]).settings.livenessPath, '');
});

test.serial('--help and --version print instead of running', t => {
	const help = parseArgs(['--help'], ROOT);
	t.is(help.kind, 'print');
	t.regex(help.kind === 'print' ? help.text : '', /--reject-period/);
	const version = parseArgs(['--version'], ROOT);
	t.regex(version.kind === 'print' ? version.text : '', /^\d+\.\d+\.\d+/);
});
