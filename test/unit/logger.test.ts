// A worker's logger loads pino at its first line (createLazyLogger), and is
// otherwise the logger createLogger makes.
import test from 'ava';
import {execFile} from 'node:child_process';
import {Writable} from 'node:stream';
import {promisify} from 'node:util';
import {createLazyLogger, createLogger, LOG_LEVELS, type LoggerOptions} from '../../src/logger.js';
import {ROOT} from '../helpers/cluster.js';

/** A destination that keeps each line, parsed, without its time. */
function collect(): {lines: Array<Record<string, unknown>>; destination: Writable} {
	const lines: Array<Record<string, unknown>> = [];
	const destination = new Writable({
		write(chunk: Buffer, _encoding, done) {
			for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
				const {time, ...rest} = JSON.parse(line) as Record<string, unknown>;
				lines.push(rest);
			}

			done();
		},
	});
	return {lines, destination};
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
