// The quick read of the command line (command-line.ts) against yargs itself: the
// same options, the same complaints, and yargs whenever the quick read is unsure.
import test from 'ava';
import {parseArgs, yargsParseArgs} from '../../src/args.js';
import {quickParseArgs} from '../../src/command-line.js';
import {seededRandom} from '../../testkit/lb-delays.js';
import {ROOT} from '../helpers/cluster.js';

const script = 'examples/hello/server.js';

/** Runs `fn` with exactly these GRACEFUL_CLUSTER_* variables (and PORT), then puts the environment back in place. */
function withEnv<T>(env: Record<string, string>, fn: () => T): T {
	const ours = (key: string): boolean => key.startsWith('GRACEFUL_CLUSTER') || key === 'PORT';
	const saved = Object.entries(process.env).filter(([key]) => ours(key));
	for (const [key] of saved) {
		delete process.env[key];
	}

	Object.assign(process.env, env);
	try {
		return fn();
	} finally {
		// Deleted and set in place: yargs keeps the process.env object it first saw.
		for (const key of Object.keys(process.env).filter(key => ours(key))) {
			delete process.env[key];
		}

		Object.assign(process.env, Object.fromEntries(saved));
	}
}

/** What a parse gives, or the message it throws. */
function outcome(parse: () => unknown): unknown {
	try {
		return {result: parse()};
	} catch (error) {
		return {error: error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error)};
	}
}

const cases: Array<[argv: string[], env?: Record<string, string>]> = [
	[[script]],
	[['-w', '3', '--reject-period', '5s', script, '--port', '3000', '-w', '1']],
	[['--workers=2', '--grace-period=2m', script]],
	[['-w=2', script]],
	[['--reject-period', '-5s', script]],
	[['--logFormat', 'json', '--rejectPeriod', '3s', script]],
	[['--log-format', 'pretty', '--log-level', 'debug', script]],
	[['--metrics', '127.0.0.1:9091', '--hung-stack', 'on', '--adaptive-reject', 'on', script]],
	[['--max-memory-restart', '300M', '--max-requests', '100', '--max-requests-jitter', '10', script]],
	[['--readiness-path', '', '--liveness-path', '/alive', script]],
	[['--grace-period', '10s', '--grace-period', '20s', '--reject-period', '15s', script]],
	[['--', script, '--x']],
	[['-w', '2', '--', script]],
	[[script, '--help']],
	[[script, 'help']],
	[['./nope/server.js']],
	[['examples/hello']],
	[[]],
	[['-w', '2']],
	[['-w']],
	[['-']],
	[['--workers', 'abc', script]],
	[['--no-workers', script]],
	[['--workers.a', '2', script]],
	[['--wrokers', '2', script]],
	[['-x', script]],
	[['-wx', '2', script]],
	[['--help']],
	[['-h']],
	[['--version']],
	[['-v', script]],
	[['-w', '2', '--help', script]],
	[['--help=false', script]],
	[['--get-yargs-completions', script]],
	[[script], {GRACEFUL_CLUSTER_WORKERS: '2', GRACEFUL_CLUSTER_REJECT_PERIOD: '7s'}],
	[['--reject-period', '3s', script], {GRACEFUL_CLUSTER_REJECT_PERIOD: '7s'}],
	[[script], {GRACEFUL_CLUSTER_LOG_FORMAT: 'pretty'}],
	[[script], {GRACEFUL_CLUSTER_WORKERS: 'many'}],
	[[script], {GRACEFUL_CLUSTER_BOGUS: '1'}],
	[[script], {GRACEFUL_CLUSTER_HELP: 'true'}],
	[[script], {GRACEFUL_CLUSTER_V: ''}],
	[[script], {GRACEFUL_CLUSTER_SERVICE_HOST: '10.0.0.1', GRACEFUL_CLUSTER_PORT_80_TCP: 'tcp://10.0.0.1:80'}],
	[['--metrics', '3000', script], {PORT: '3000'}],
	[['--workers=', script]],
	[['--metrics=127.0.0.1:9091', '--readiness-path=/ready=yes', script]],
	[['-w', '2', '--workers', '3', '-w', '4', script]],
	[['--workers=2', '-w', '3', script]],
	[['--log-level', 'debug', '--log-level=warn', script]],
	[[script], {GRACEFUL_CLUSTER_W: '3'}],
	[[script], {GRACEFUL_CLUSTER_Workers: '3'}],
	[[script], {GRACEFUL_CLUSTER_LOG__LEVEL: 'warn'}],
	[[script], {GRACEFUL_CLUSTER_REJECTPERIOD: '3s'}],
	[[script], {GRACEFUL_CLUSTER_READINESS_PATH: ''}],
	[['-w', '2', script], {GRACEFUL_CLUSTER_WORKERS: 'many'}],
	[['--', '--weird.js']],
	[['-w', '2', '']],
	[[script], {GRACEFUL_CLUSTER_REPLACEMENT: 'on', GRACEFUL_CLUSTER_PEER_RATES: 'off'}],
	[['--readiness-path=\'\'', script]],
	[['--readiness-path=\'/ready\'', '--serve-period="5s"', script]],
	[['--readiness-path', '\'/ready\'', script]],
	[['--metrics="9464', script]],
	[[script], {GRACEFUL_CLUSTERWORKERS: '3'}],
	[[script], {GRACEFUL_CLUSTER: 'x'}],
	[[script], {GRACEFUL_CLUSTERING: 'x'}],
];

test.serial('the quick read gives what yargs gives, or leaves the command line to yargs', t => {
	let quick = 0;
	for (const [argv, env = {}] of cases) {
		const name = `${JSON.stringify(argv)} ${JSON.stringify(env)}`;
		withEnv(env, () => {
			const viaYargs = outcome(() => yargsParseArgs(argv, ROOT));
			t.deepEqual(outcome(() => parseArgs(argv, ROOT)), viaYargs, name);
			const read = outcome(() => quickParseArgs(argv, ROOT));
			if (!('result' in (read as object)) || (read as {result: unknown}).result !== undefined) {
				quick++;
				t.deepEqual(read, viaYargs, name);
			}
		});
	}

	// The plain ones, at least, are read without yargs.
	t.true(quick >= 20, `${quick} read quickly`);
});

test.serial('a plain command line, its errors in its values included, never needs yargs', t => {
	for (const argv of [[script], ['-w', '2', '--reject-period', '5s', script, '--help'], ['--workers', 'abc', script], ['nope.js']]) {
		withEnv({GRACEFUL_CLUSTER_GRACE_PERIOD: '60s'}, () => {
			t.not(outcome(() => quickParseArgs(argv, ROOT)), {result: undefined}, JSON.stringify(argv));
		});
	}

	for (const argv of [['--help'], ['--version'], ['--bogus', script]]) {
		t.deepEqual(outcome(() => quickParseArgs(argv, ROOT)), {result: undefined}, JSON.stringify(argv));
	}
});

/** Command lines made of the pieces people write and the ones they get wrong, in random order and number. */
function generated(count: number): Array<[argv: string[], env: Record<string, string>]> {
	const random = seededRandom(21);
	const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
	const options = ['-w', '--workers', '--reject-period', '--grace-period', '--log-level', '--log-format', '--metrics', '--readiness-path', '--hung-stack', '--max-requests', '--rejectPeriod', '--no-workers', '-x', '--bogus', '--help', '-v', '-w=2', '--workers=', '--workers=2', '--reject-period=3s', '--metrics=127.0.0.1:9464', '--log-level=warn', '--readiness-path=/a=b', '--Workers', '--readiness-path=\'\'', '--serve-period="5s"'];
	const values = ['2', '3s', '-5s', '', 'debug', 'pretty', 'on', '9464', 'abc', '0', script];
	const scripts = [script, script, 'nope.js', '-', '--', 'examples/hello'];
	const appArgs = ['--port', '3000', '-w', '1', '--help', 'help'];
	const variables: Record<string, string> = {
		GRACEFUL_CLUSTER_WORKERS: '2', GRACEFUL_CLUSTER_W: '3', GRACEFUL_CLUSTER_REJECT_PERIOD: '4s', GRACEFUL_CLUSTER_Reject_Period: '1s',
		GRACEFUL_CLUSTER_LOG__LEVEL: 'x', GRACEFUL_CLUSTER_LOG_LEVEL: 'warn', GRACEFUL_CLUSTER_SERVICE_HOST: '10.0.0.1', GRACEFUL_CLUSTER_LOG_FORMAT: 'loud',
		GRACEFUL_CLUSTER_READINESS_PATH: '\'/r\'',
	};
	return Array.from({length: count}, () => {
		const argv: string[] = [];
		for (let n = Math.floor(random() * 4); n > 0; n--) {
			argv.push(pick(options));
			if (random() < 0.8) {
				argv.push(pick(values));
			}
		}

		if (random() < 0.95) {
			argv.push(pick(scripts));
		}

		for (let n = Math.floor(random() * 3); n > 0; n--) {
			argv.push(pick(appArgs));
		}

		const env = Object.fromEntries(Object.entries(variables).filter(() => random() < 0.12));
		return [argv, env];
	});
}

test.serial('on generated command lines too, the quick read gives what yargs gives, or leaves it to yargs', t => {
	let quick = 0;
	const lines = generated(400);
	for (const [argv, env] of lines) {
		withEnv(env, () => {
			const read = outcome(() => quickParseArgs(argv, ROOT));
			if (!('result' in (read as object)) || (read as {result: unknown}).result !== undefined) {
				quick++;
				t.deepEqual(read, outcome(() => yargsParseArgs(argv, ROOT)), `${JSON.stringify(argv)} ${JSON.stringify(env)}`);
			}
		});
	}

	// Enough of them read quickly, their errors included, to mean something.
	t.true(quick >= lines.length / 4, `${quick} of ${lines.length} read quickly`);
});
