// Bad input through the real CLI: exit 2 at once, a message naming the problem, nothing started.
import {cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, {type ExecutionContext} from 'ava';
import {ExitCode} from '../../src/exit-codes.js';
import {fixture, ROOT, start} from '../helpers/cluster.js';

const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
	['unknown flag', ['--wrokers', '2', fixture('app.mjs')], {}, /Unknown option --wrokers \(did you mean --workers\?\)/],
	['workers not a number', ['--workers', 'abc', fixture('app.mjs')], {}, /--workers.*"abc"/],
	['grace period not a duration', ['--grace-period', 'banana', fixture('app.mjs')], {}, /--grace-period.*"banana" is not a duration/],
	['serve + reject >= grace', ['--reject-period', '10s', '--grace-period', '10s', fixture('app.mjs')], {}, /must be less than --grace-period/],
	['missing script', ['./nope/server.js'], {}, /Script not found: \.\/nope\/server\.js/],
	['no script', [], {}, /No script given/],
	['bad environment value', [fixture('app.mjs')], {GRACEFUL_CLUSTER_WORKERS: 'many'}, /--workers \(GRACEFUL_CLUSTER_WORKERS\): "many"/],
	['readiness and liveness on one path', ['--readiness-path', '/health', '--liveness-path', '/health', fixture('app.mjs')], {}, /--readiness-path \(GRACEFUL_CLUSTER_READINESS_PATH\) and --liveness-path \(GRACEFUL_CLUSTER_LIVENESS_PATH\) are both "\/health".*Give them different paths/],
	['GRACEFUL_CLUSTER_HELP in the environment', [fixture('app.mjs')], {GRACEFUL_CLUSTER_HELP: 'true'}, /GRACEFUL_CLUSTER_HELP is set \(to "true"\), but --help is a command-line flag.*Remove GRACEFUL_CLUSTER_HELP from the environment/],
	['GRACEFUL_CLUSTER_VERSION in the environment', [fixture('app.mjs')], {GRACEFUL_CLUSTER_VERSION: '1.2.3'}, /GRACEFUL_CLUSTER_VERSION is set \(to "1\.2\.3"\), but --version is a command-line flag/],
	['negative duration', ['--reject-period', '-5s', fixture('app.mjs')], {}, /--reject-period \(GRACEFUL_CLUSTER_REJECT_PERIOD\): "-5s" is not a duration\. A duration cannot be negative/],
	['-w took the script', ['-w', fixture('app.mjs')], {}, /-w \(--workers\) takes a whole number, but ".*app\.mjs" after it looks like the script/],
	['a directory as the script', ['examples/hello'], {}, /Script examples\/hello is a directory: pass the app's entry file \(e\.g\. examples\/hello\/server\.js, which is in it\)/],
];

for (const [name, args, env, pattern] of cases) {
	test(`usage error: ${name}`, async t => {
		const cli = start(t, args, {env});
		const exit = await cli.exited;
		t.is(exit.code, 2);
		t.regex(cli.text(), pattern);
		t.regex(cli.text(), /^graceful-cluster: /m);
		t.false(cli.text().includes('starting workers'));
	});
}

test('--help lists the options with their types and defaults, and the exit codes; exits 0', async t => {
	const cli = start(t, ['--help']);
	t.is((await cli.exited).code, 0);
	const text = cli.text();
	t.regex(text, /--serve-period[\s\S]*--reject-period[\s\S]*--grace-period/);
	t.regex(text, /--reject-period .*\[duration\]\u00A0\[default: 20s\]/);
	t.regex(text, /Exit codes:/);
	for (const [name, code] of Object.entries(ExitCode)) {
		t.regex(text, new RegExp(`^${code}  ${name} `, 'm'), name);
	}
});

test('a plain --help or --version prints what yargs prints (they are answered without it: print-only.ts)', async t => {
	for (const flag of ['--help', '-h', '--version', '-v']) {
		const quick = start(t, [flag]);
		// A variable of ours sends the same flag through yargs.
		const viaYargs = start(t, [flag], {env: {GRACEFUL_CLUSTER_LOG_LEVEL: 'info'}});
		const [quickExit, yargsExit] = await Promise.all([quick.exited, viaYargs.exited]);
		t.is(quickExit.code, 0, flag);
		t.is(yargsExit.code, 0, flag);
		t.is(quick.text(), viaYargs.text(), flag);
	}
});

/**
 * What the package runs, copied where no node_modules is above it, then
 * `change`d (given the copy's dist/bundle); removed in teardown. Returns its CLI.
 */
function copyOfPackage(t: ExecutionContext, change: (bundle: string) => void = () => {}): string {
	const root = mkdtempSync(path.join(os.tmpdir(), 'gc-partial-'));
	t.teardown(() => {
		rmSync(root, {recursive: true, force: true});
	});
	for (const part of ['package.json', 'dist/bundle']) {
		cpSync(path.join(ROOT, part), path.join(root, part), {recursive: true});
	}

	change(path.join(root, 'dist/bundle'));
	return path.join(root, 'dist/bundle/cli.cjs');
}

const remove = (file: string) => (bundle: string) => {
	rmSync(path.join(bundle, file));
};

const INCOMPLETE = /^graceful-cluster: its installation is incomplete, so nothing was started: /m;

// Found later instead, a worker failed when it first needed the file (the
// stack-capture thread's, when its app hangs); or every worker crashed at start,
// or the primary with a raw stack (found by hostile trials).
const partialCopies: Array<[string, (bundle: string) => void, string[], RegExp]> = [
	['a worker file loaded late missing (the stack-capture thread)', remove('worker/watchdog-thread.js'), [], /\/dist\/bundle\/worker\/watchdog-thread\.js \(missing\)/],
	['a worker file loaded late cut short', bundle => {
		const file = path.join(bundle, 'worker/watchdog-thread.js');
		writeFileSync(file, readFileSync(file).subarray(0, 100));
	}, [], /\/dist\/bundle\/worker\/watchdog-thread\.js \(100 bytes; the build wrote \d+\)/],
	['a chunk of the workers\' missing', bundle => {
		rmSync(path.join(bundle, 'worker', readdirSync(path.join(bundle, 'worker')).find(file => file.startsWith('chunk-'))!));
	}, [], /\/dist\/bundle\/worker\/chunk-[\w-]+\.js \(missing\)/],
	['the workers\' bootstrap missing', remove('worker/bootstrap.cjs'), [], /\/dist\/bundle\/worker\/bootstrap\.cjs \(missing\)/],
	['the primary\'s main file missing', remove('main.cjs'), [], /\/dist\/bundle\/main\.cjs \(missing\)/],
	['the primary\'s main file cut at a statement\'s end (it loads, without its main())', bundle => {
		const file = path.join(bundle, 'main.cjs');
		writeFileSync(file, readFileSync(file, 'utf8').split('\n').slice(0, 30).join('\n'));
	}, [], /\/dist\/bundle\/main\.cjs \(\d+ bytes; the build wrote \d+\)/],
	['the primary\'s main file cut just before its main() (it loads; its exports\' getter throws a ReferenceError)', bundle => {
		const file = path.join(bundle, 'main.cjs');
		const text = readFileSync(file, 'utf8');
		writeFileSync(file, text.slice(0, text.lastIndexOf('\n', text.indexOf('async function main('))));
	}, [], /\/dist\/bundle\/main\.cjs \(\d+ bytes; the build wrote \d+\)/],
	['the primary\'s main file cut short (a SyntaxError, which names no file)', bundle => {
		const file = path.join(bundle, 'main.cjs');
		writeFileSync(file, readFileSync(file).subarray(0, -10));
	}, [], /\/dist\/bundle\/main\.cjs \(\d+ bytes; the build wrote \d+\)/],
	['no node_modules: prom-client for --metrics', () => {}, ['--metrics', '127.0.0.1:9'], /the package prom-client, which it needs for --metrics, is not installed/],
	['no node_modules: pino-pretty for pretty logs', () => {}, ['--log-format', 'pretty'], /the package pino-pretty, which it needs for pretty logs/],
	['no node_modules: yargs for a command line the quick read leaves to it', () => {}, ['--workers=\'1\''], /the package yargs, which it needs to read this command line, is not installed/],
];

for (const [name, change, options, pattern] of partialCopies) {
	test(`a partial copy of the package exits 8 at once, saying what is wrong; nothing is started: ${name}`, async t => {
		const cli = start(t, [copyOfPackage(t, change), '-w', '1', ...options, fixture('app.mjs')], {plainNode: true});
		const exit = await cli.exited;
		t.is(exit.code, ExitCode.INCOMPLETE_INSTALL, cli.text());
		t.regex(cli.text(), INCOMPLETE);
		t.regex(cli.text(), pattern);
		t.false(cli.text().includes('starting workers'));
	});
}

test('a whole copy of the package starts (the checks above look where the files are)', async t => {
	const cli = start(t, [copyOfPackage(t), '-w', '1', '--reject-period', '100ms', fixture('app.mjs')], {plainNode: true});
	await cli.waitForLog('worker listening');
	cli.kill('SIGTERM');
	t.is((await cli.exited).code, ExitCode.OK, cli.text());
});

test('the CLI\'s path before it became CommonJS (dist/bundle/cli.js, which a Dockerfile or unit may name) still starts the cluster and drains it', async t => {
	const cli = start(t, [path.join(path.dirname(copyOfPackage(t)), 'cli.js'), '-w', '1', '--reject-period', '100ms', fixture('app.mjs')], {plainNode: true});
	await cli.waitForLog('worker listening');
	cli.kill('SIGTERM');
	t.is((await cli.exited).code, ExitCode.OK, cli.text());
	t.regex(cli.text(), /drain finished/);
});

test('a primary whose event loop runs dry before main() ends it exits 1, saying so, not 0 (a bug of ours made to happen: main() awaits forever)', async t => {
	const cli = start(t, [copyOfPackage(t, bundle => {
		const file = path.join(bundle, 'main.cjs');
		writeFileSync(file, readFileSync(file, 'utf8').replace(/^async function main\((.*)\) \{$/m, 'async function main($1) {\n  await new Promise(() => {});'));
	}), '-w', '1', fixture('app.mjs')], {plainNode: true});
	const exit = await cli.exited;
	t.is(exit.code, ExitCode.INTERNAL, cli.text());
	t.regex(cli.text(), /graceful-cluster: the primary stopped before it finished; please report this at https:\/\/github\.com\/graceful-cluster\/graceful-cluster\/issues\n/);
});

test('the CLI\'s old path (cli.js) with cli.cjs missing exits 8, saying so; nothing is started', async t => {
	const cli = start(t, [path.join(path.dirname(copyOfPackage(t, remove('cli.cjs'))), 'cli.js'), '-w', '1', fixture('app.mjs')], {plainNode: true});
	const exit = await cli.exited;
	t.is(exit.code, ExitCode.INCOMPLETE_INSTALL, cli.text());
	t.regex(cli.text(), INCOMPLETE);
	t.regex(cli.text(), /cli\.cjs/);
	t.false(cli.text().includes('starting workers'));
});

test('an app whose own copy of the helper is partial fails at its start, saying so, not at its drain', async t => {
	const copy = path.dirname(copyOfPackage(t, remove('worker/watchdog-thread.js')));
	const app = path.join(path.dirname(copy), 'server.mjs');
	writeFileSync(app, `import http from 'node:http';
import {attach} from ${JSON.stringify(path.join(copy, 'worker/index.js'))};
const server = http.createServer((request, response) => response.end('ok'));
attach(server);
server.listen(0);
`);
	const cli = start(t, ['-w', '1', '--max-start-failures', '1', app]);
	t.is((await cli.exited).code, ExitCode.START_FAILED, cli.text());
	t.regex(cli.text(), /graceful-cluster\/worker: its installation is incomplete: \S+\/worker\/watchdog-thread\.js \(missing\)/);
});

test('an option of graceful-cluster\'s after the script goes to the app, as everything after it does; the CLI says so on stderr, and starts', async t => {
	const cli = start(t, ['-w', '1', '--reject-period', '100ms', fixture('app.mjs'), '--reject-period', '2s', '--port', '80']);
	const starting = await cli.waitForLog('starting workers');
	t.deepEqual(starting['args'], ['--reject-period', '2s', '--port', '80']);
	t.is(starting['rejectPeriodMs'], 100);
	t.regex(cli.text(), new RegExp(`^graceful-cluster: --reject-period comes after the app's script, so it goes to the app; put it before ${fixture('app.mjs').replaceAll('.', '\\.')} to set graceful-cluster's`, 'm'));
	t.notRegex(cli.text(), /--port comes after/);
	await cli.waitForLog('worker listening');
	cli.kill('SIGTERM');
	t.is((await cli.exited).code, ExitCode.OK, cli.text());
});

test('npm run example\'s script puts the flags given to it before the app\'s path, as graceful-cluster\'s, says the command, and runs it in its own process', async t => {
	const scripts = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {scripts: Record<string, string>}).scripts;
	t.is(scripts['example'], 'npm run build && node scripts/example.js');
	// As `npm run example -- --reject-period 100ms -- --verbose` runs it, after the build.
	const example = start(t, ['scripts/example.js', '--reject-period', '100ms', '--', '--verbose'], {plainNode: true, env: {PORT: '0'}});
	const starting = await example.waitForLog('starting workers');
	t.like(starting, {rejectPeriodMs: 100, workers: 2, args: ['--verbose'], script: path.join(ROOT, 'examples/hello/server.js'), pid: example.pid});
	t.regex(example.text(), /^example: graceful-cluster --workers 2 --reject-period 100ms examples\/hello\/server\.js --verbose$/m);
	t.notRegex(example.text(), /comes after the app's script/);
	await example.waitForLog('worker listening', {count: 2});
	example.kill('SIGTERM');
	t.is((await example.exited).code, ExitCode.OK, example.text());
	t.like(example.lines.find(line => line.msg === 'drain finished'), {rejectEndedMs: 100});
});
