// Option parsing, on plain arrays (and process.env, which yargs' .env() reads).
import test from 'ava';
import path from 'node:path';
import {parseArgs, yargsParseArgs} from '../../src/args.js';
import {quickParseArgs} from '../../src/command-line.js';
import {UsageError} from '../../src/errors.js';
import {ExitCode} from '../../src/exit-codes.js';
import {parseOptions} from '../helpers/args.js';
import {ROOT} from '../helpers/cluster.js';

const script = 'examples/hello/server.js';

const run = parseOptions;

function usageError(t: import('ava').ExecutionContext, argv: string[], pattern: RegExp, env: Record<string, string> = {}) {
	const error = t.throws(() => run(argv, env), {instanceOf: UsageError});
	t.regex(error?.message ?? '', pattern);
	return error?.message ?? '';
}

function help(): string {
	const result = parseArgs(['--help'], ROOT);
	return result.kind === 'print' ? result.text : '';
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
	usageError(t, ['--bogus', script], /Unknown option --bogus\. .*--help/s);
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
	usageError(t, ['examples'], /Script examples is a directory: pass the app's entry file \(e\.g\. examples\/server\.js\)\.$/);
	usageError(t, [script], /GRACEFUL_CLUSTER_REJECT_PERIOD.*"soon"/, {GRACEFUL_CLUSTER_REJECT_PERIOD: 'soon'});
	usageError(t, [script], /Unknown environment variable GRACEFUL_CLUSTER_REJECT_PERIODS/, {GRACEFUL_CLUSTER_REJECT_PERIODS: '5s'});
	usageError(t, ['-x', script], /Unknown option -x\. Options go before the script/);
	// Named once, as written (yargs adds the camelCase form), with the option it likely meant.
	usageError(t, ['--reject-perod', '3s', script], /^Unknown option --reject-perod \(did you mean --reject-period\?\)\. Options go/);
	usageError(t, ['--rejectPerod', '3s', '--bogus', '1', script], /^Unknown options --rejectPerod \(did you mean --reject-period\?\), --bogus\. Options go/);
	usageError(t, ['--Workers', '2', script], /^Unknown option --Workers \(did you mean --workers\?\)\. Options go/);
	usageError(t, ['--FOO', '2', script], /^Unknown option --FOO\. Options go/);
	usageError(t, ['--x', '2', script], /^Unknown option --x\. Options go/);
});

test.serial('an option in the wrong case is refused, not read as its default', t => {
	usageError(t, ['--reject-Period', '3s', script], /--reject-Period is not an option: options are written in lower case\. Write --reject-period, before the script\./);
	usageError(t, ['--LOG-LEVEL=debug', script], /Write --log-level=debug, before the script/);
	usageError(t, ['-w', '2', '--Grace-Period', '9s', script], /--Grace-Period is not an option/);
	// The camelCase form is the option to yargs, and stays so; after the script, anything goes to the app.
	t.is(run(['--rejectPeriod', '3s', script]).settings.rejectPeriodMs, 3000);
	t.deepEqual(run([script, '--Reject-Period', 'x']).args, ['--Reject-Period', 'x']);
});

test.serial('--metrics on the app\'s PORT: the port suggested instead is another one', t => {
	usageError(t, ['--metrics', '9091', script], /PORT=9091.*another port \(9464, say\)/, {PORT: '9091'});
	usageError(t, ['--metrics', '8080', script], /PORT=8080.*another port \(9091, say\)/, {PORT: '8080'});
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

test.serial('the variables a primary gives its workers that are no option\'s do not stop a CLI the app starts itself', t => {
	const env = {GRACEFUL_CLUSTER_REPLACEMENT: 'on', GRACEFUL_CLUSTER_PEER_RATES: 'off', GRACEFUL_CLUSTER_REJECT_PERIOD: '4s'};
	t.is(run([script], env).settings.rejectPeriodMs, 4000);
	// A camelCase flag is read by yargs itself (command-line.ts): the same there.
	t.is(run(['--gracePeriod', '60s', script], env).settings.rejectPeriodMs, 4000);
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

test.serial('readiness and liveness on the same path: an error naming both, from flags or variables', t => {
	const both = /^--readiness-path \(GRACEFUL_CLUSTER_READINESS_PATH\) and --liveness-path \(GRACEFUL_CLUSTER_LIVENESS_PATH\) are both "\/health": .*liveness probe would fail.*Give them different paths \(e\.g\. --readiness-path \/readyz --liveness-path \/livez\), or '' to turn one off\.$/;
	usageError(t, ['--readiness-path', '/health', '--liveness-path', '/health', script], both);
	usageError(t, [script], both, {GRACEFUL_CLUSTER_READINESS_PATH: '/health', GRACEFUL_CLUSTER_LIVENESS_PATH: '/health'});
	usageError(t, ['--liveness-path', '/readyz', script], /both "\/readyz"/, {}); // against the other's default
	t.like(run(['--readiness-path', '', '--liveness-path', '', script]).settings, {readinessPath: '', livenessPath: ''}, 'both off is fine');
	t.like(run(['--readiness-path', '/health', '--liveness-path', '/live', script]).settings, {readinessPath: '/health', livenessPath: '/live'});
});

test.serial('GRACEFUL_CLUSTER_HELP / _VERSION (any value) are usage errors naming the variable; the flags still print', t => {
	for (const [key, value, flag, what] of [
		['GRACEFUL_CLUSTER_HELP', 'true', '--help', 'help'],
		['GRACEFUL_CLUSTER_HELP', '1', '--help', 'help'],
		['GRACEFUL_CLUSTER_VERSION', 'true', '--version', 'version'],
		['GRACEFUL_CLUSTER_VERSION', '1.2.3', '--version', 'version'],
		['GRACEFUL_CLUSTER_H', 'true', '-h', 'help'],
		['GRACEFUL_CLUSTER_V', '', '-v', 'version'],
	] as const) {
		const message = usageError(t, [script], new RegExp(`^${key} is set \\(to "${value.replaceAll('.', '\\.')}"\\), but ${flag} is a command-line flag, not an option a variable can set`), {[key]: value});
		t.true(message.includes(`print its ${what} and exit 0 instead of starting the app. Remove ${key} from the environment; run graceful-cluster ${flag} to see the ${what}.`), message);
	}

	process.env['GRACEFUL_CLUSTER_HELP'] = 'true';
	try {
		t.is(parseArgs(['--help'], ROOT).kind, 'print', 'an explicit flag still prints');
		t.is(parseArgs(['-h'], ROOT).kind, 'print');
		const version = parseArgs(['-v'], ROOT);
		t.regex(version.kind === 'print' ? version.text : '', /^\d+\.\d+\.\d+/);
	} finally {
		delete process.env['GRACEFUL_CLUSTER_HELP'];
	}
});

test.serial('values that start with "-" reach their option, which names itself and the value', t => {
	usageError(t, ['--reject-period', '-5s', script], /^--reject-period \(GRACEFUL_CLUSTER_REJECT_PERIOD\): "-5s" is not a duration\. A duration cannot be negative\. Write it as 500ms, 20s, 2m or a number of seconds\.$/);
	usageError(t, ['--grace-period', '-1', script], /^--grace-period \(GRACEFUL_CLUSTER_GRACE_PERIOD\): "-1" is not a duration\. A duration cannot be negative/);
	usageError(t, ['--workers', '-1', script], /^--workers \(GRACEFUL_CLUSTER_WORKERS\): "-1" is not a whole number from 1 to 1024\.$/);
	usageError(t, ['-w', '-2', script], /^--workers \(GRACEFUL_CLUSTER_WORKERS\): "-2" is not a whole number/);
	usageError(t, ['--readiness-path', '-x', script], /^--readiness-path \(GRACEFUL_CLUSTER_READINESS_PATH\): "-x" is not a request path/);
	t.is(run(['--liveness-path', '/-/live', script]).settings.livenessPath, '/-/live');
	t.deepEqual(run(['-w', '2', script, '--delay', '-5s']).args, ['--delay', '-5s'], 'the app\'s arguments are untouched');
});

test.serial('an option with no value after it says so', t => {
	usageError(t, ['--reject-period', '--grace-period', '5s', script], /^--reject-period \(GRACEFUL_CLUSTER_REJECT_PERIOD\) needs a value, a duration \(500ms, 20s, 2m or a number of seconds\): write --reject-period 20s, before the script\.$/);
	usageError(t, ['-w'], /^-w \(GRACEFUL_CLUSTER_WORKERS\) needs a value, a whole number: write -w 4, before the script\.$/);
	usageError(t, ['--readiness-path', '-h', script], /^--readiness-path .* needs a value, a request path/);
});

test.serial('an option that took the script as its value: it says which, and how to write it', t => {
	const fix = /^-w \(--workers\) takes a whole number, but "examples\/hello\/server\.js" after it looks like the script, so no script was given\. Give -w its value before the script: graceful-cluster -w 4 examples\/hello\/server\.js, or leave -w out for its default\.$/;
	usageError(t, ['-w', script], fix);
	usageError(t, ['-w', script, '--port', '3000'], fix, {}); // yargs' "Unknown argument: port" otherwise
	usageError(t, ['-w', 'app.mjs'], /^-w \(--workers\) takes a whole number, but "app\.mjs" after it looks like the script/);
	usageError(t, ['--reject-period', 'server.js'], /^--reject-period takes a duration .*"server\.js" after it looks like the script.*graceful-cluster --reject-period 20s server\.js/);
	usageError(t, ['-w', 'four'], /^No script given/, {});
});

test.serial('a directory as the script: pass its entry file, suggesting the one that is there', t => {
	usageError(t, ['examples/hello'], /^Script examples\/hello is a directory: pass the app's entry file \(e\.g\. examples\/hello\/server\.js, which is in it\)\.$/);
	usageError(t, ['examples/commonjs'], /\(e\.g\. examples\/commonjs\/server\.cjs, which is in it\)/);
	usageError(t, ['test'], /^Script test is a directory: pass the app's entry file \(e\.g\. test\/server\.js\)\.$/);
});

test.serial('--help: a type and a default per option, and the exit codes', t => {
	const text = help();
	t.regex(text, /--reject-period +then answer new requests 503 \+ Retry-After this long +\[duration\]\u00A0\[default: 20s\]/);
	t.regex(text, /--workers[^[]+\[number\]\u00A0\[default: the container's CPU limit/);
	t.regex(text, /\[path\]\u00A0\[default: \/readyz\]/);
	t.regex(text, /\[level\]\u00A0\[default: info\]/);
	t.regex(text, /\[seconds\]\u00A0\[default: 1\]/);
	t.false(text.includes('[string]'));
	t.regex(text, /\nExit codes:\n0 {2}OK {18}every worker drained/);
	for (const [name, code] of Object.entries(ExitCode)) {
		t.regex(text, new RegExp(`^${code} {2}${name} +\\S`, 'm'), name);
	}
});

test.serial('an option of graceful-cluster\'s after the script goes to the app, and is said once, whichever way the command line is read; not after a --', t => {
	const said = (flag: string) => `${flag} comes after the app's script, so it goes to the app; put it before ${script} to set graceful-cluster's (if the app's own is meant, a -- before the script says so)`;
	const cases: Array<[string[], string[]]> = [
		[[script, '--reject-period', '2s'], [said('--reject-period')]],
		// As `npm run example -- --reject-period 2s --workers=3` wrote it, each flag once.
		[['-w', '2', script, '--reject-period', '2s', '--workers=3', '--reject-period', '1s'], [said('--reject-period'), said('--workers')]],
		// Short aliases, --help, --version and the app's own flags are the app's business.
		[[script, '-w', '3', '--help', '--version', '--port', '3000', '--reject'], []],
		// Past the app's own `--`, and after a `--` that ends graceful-cluster's options.
		[[script, '--', '--reject-period', '2s'], []],
		[['--', script, '--reject-period', '2s'], []],
		[[script], []],
	];
	for (const [argv, warnings] of cases) {
		// Through the quick read, and through yargs.
		for (const [read, result] of [['quick', quickParseArgs(argv, ROOT)], ['yargs', yargsParseArgs(argv, ROOT)]] as const) {
			t.deepEqual(result?.kind === 'run' ? result.warnings : undefined, warnings, `${read}: ${JSON.stringify(argv)}`);
			t.deepEqual(result?.kind === 'run' ? result.options.args : undefined, argv.slice(argv.indexOf(script) + 1), `${read}: ${JSON.stringify(argv)}`);
		}
	}
});

test('a flag given twice: the last one wins, as in most CLIs', t => {
	const result = parseArgs(['--grace-period', '10s', '--grace-period', '20s', '--reject-period', '15s', 'examples/hello/server.js'], ROOT);
	t.is(result.kind === 'run' ? result.options.settings.gracePeriodMs : undefined, 20_000);
});
