// A worker's logger loads pino at its first line (createLazyLogger), and is
// otherwise the logger createLogger makes.
import test from 'ava';
import {execFile} from 'node:child_process';
import {Writable} from 'node:stream';
import {promisify} from 'node:util';
import {setTimeout as delay} from 'node:timers/promises';
import {createHeldLogger, createLazyLogger, createLogger, LOG_LEVELS, type LoggerOptions} from '../../src/logger.js';
import {ROOT} from '../helpers/cluster.js';

/** A destination that keeps each line, parsed, without its time (in `times`). */
function collect(): {lines: Array<Record<string, unknown>>; times: number[]; destination: Writable} {
	const lines: Array<Record<string, unknown>> = [];
	const times: number[] = [];
	const destination = new Writable({
		write(chunk: Buffer, _encoding, done) {
			for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
				const {time, ...rest} = JSON.parse(line) as Record<string, unknown>;
				lines.push(rest);
				times.push(time as number);
			}

			done();
		},
	});
	return {lines, times, destination};
}

test('isLevelEnabled: what pino answers, for every level at every level', t => {
	for (const level of LOG_LEVELS) {
		const eager = createLogger({role: 'worker', level, workerId: 1});
		const lazy = createLazyLogger({role: 'worker', level, workerId: 1});
		for (const asked of [...LOG_LEVELS, 'nonsense']) {
			t.is(lazy.isLevelEnabled(asked), eager.isLevelEnabled(asked), `${asked} at ${level}`);
		}
	}
});

test('the lines are the ones createLogger writes', t => {
	const options = (destination: Writable): LoggerOptions => ({role: 'worker', level: 'debug', workerId: 3, destination});
	const eager = collect();
	const lazy = collect();
	for (const logger of [createLogger(options(eager.destination)), createLazyLogger(options(lazy.destination))]) {
		t.true(logger.isLevelEnabled('debug'));
		logger.info({signal: 'SIGTERM'}, 'signal received by the worker; waiting for the primary to drain it');
		logger.debug({failures: ['db']}, 'warming up');
		logger.error({err: new Error('boom')}, 'a shutdown hook failed; running the rest');
		logger.trace('not written');
	}

	const withoutStack = (line: Record<string, unknown>) => ({...line, err: line['err'] && {...(line['err'] as object), stack: undefined}});
	t.deepEqual(lazy.lines.map(withoutStack), eager.lines.map(withoutStack));
	t.is(lazy.lines.length, 3);
	t.like(lazy.lines[0], {level: 'info', role: 'worker', pid: process.pid, worker: 3, signal: 'SIGTERM'});
});

test('a method is bound once, and a child logger writes as createLogger\'s does', t => {
	const {lines, destination} = collect();
	const lazy = createLazyLogger({role: 'worker', level: 'debug', workerId: 4, destination});
	t.is(lazy.debug, lazy.debug);
	const info = lazy.info;
	info('detached call');
	lazy.child({hook: 'db'}).warn('slow hook');
	t.like(lines[0], {level: 'info', worker: 4, msg: 'detached call'});
	t.like(lines[1], {level: 'warn', worker: 4, hook: 'db', msg: 'slow hook'});
	t.is(lines.length, 2);
});

test('a level pino does not know throws at once, as createLogger does', t => {
	t.throws(() => createLazyLogger({role: 'worker', level: 'loud'}));
});

test('pino is not loaded until the first line, and isLevelEnabled does not load it', async t => {
	// A fresh process: this one has pino loaded already.
	const script = `
		import {createRequire} from 'node:module';
		const {createLazyLogger} = await import('./dist/src/logger.js');
		const loaded = () => Object.keys(createRequire(import.meta.url).cache).some(file => /[\\\\/]pino[\\\\/]pino\\.js$/.test(file));
		const logger = createLazyLogger({role: 'worker', level: 'info', workerId: 1});
		const before = [loaded(), logger.isLevelEnabled('debug'), loaded()];
		logger.info('first line');
		console.log(JSON.stringify({before, after: loaded()}));
	`;
	const {stdout} = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {cwd: ROOT});
	const lines = stdout.trim().split('\n');
	t.like(JSON.parse(lines[0]!), {msg: 'first line', role: 'worker'});
	t.deepEqual(JSON.parse(lines[1]!), {before: [false, false, false], after: true});
});

test('a held logger writes nothing until released, then its lines in order, each with the time it was logged at', async t => {
	const {lines, times, destination} = collect();
	const {logger, release} = createHeldLogger({role: 'primary', level: 'info', destination});
	t.true(logger.isLevelEnabled('info'));
	t.false(logger.isLevelEnabled('debug'));
	const before = Date.now();
	logger.info({workers: 2}, 'starting workers');
	logger.debug('not written');
	await delay(30);
	const second = Date.now();
	logger.warn({worker: 1}, 'worker started');
	await delay(30);
	t.is(lines.length, 0);

	const releasedAt = Date.now();
	release();
	logger.info('after the release');
	release();
	t.deepEqual(lines.map(line => line['msg']), ['starting workers', 'worker started', 'after the release']);
	t.like(lines[0], {level: 'info', role: 'primary', pid: process.pid, workers: 2});
	t.like(lines[1], {level: 'warn', worker: 1});
	t.true(times[0]! >= before && times[0]! < second, `${times[0]} logged at ${before}`);
	t.true(times[1]! >= second && times[1]! < releasedAt, `${times[1]} logged at ${second}`);
	t.true(times[2]! >= releasedAt);
});

test('a held logger\'s error line releases it at once, after the lines held before it', t => {
	const {lines, destination} = collect();
	const {logger} = createHeldLogger({role: 'primary', level: 'info', destination});
	logger.info('held');
	logger.error({err: new Error('boom')}, 'graceful-cluster crashed; please report this');
	logger.info('straight through');
	t.deepEqual(lines.map(line => `${String(line['level'])} ${String(line['msg'])}`), ['info held', 'error graceful-cluster crashed; please report this', 'info straight through']);
});

test('a held logger\'s lines are written when the process exits before the release', async t => {
	const script = `
		const {createHeldLogger} = await import('./dist/src/logger.js');
		const {logger} = createHeldLogger({role: 'primary', level: 'info'});
		logger.info('held until the exit');
		process.exit(0);
	`;
	const {stdout} = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {cwd: ROOT});
	t.like(JSON.parse(stdout.trim()), {msg: 'held until the exit', role: 'primary'});
});
