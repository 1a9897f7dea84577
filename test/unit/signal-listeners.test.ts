// Which of the app's held signal listeners a leave calls, and how: in a child
// process, since holding patches `process` (test/fixtures/held-listeners.mjs).
import test from 'ava';
import {execFile} from 'node:child_process';
import {promisify} from 'node:util';
import {fixture} from '../helpers/cluster.js';

const run = promisify(execFile);

async function scenario(name: string): Promise<Record<string, unknown>> {
	const {stdout} = await run(process.execPath, [fixture('held-listeners.mjs'), name], {timeout: 10_000});
	return JSON.parse(stdout) as Record<string, unknown>;
}

test('the received signal\'s listeners run, once each, in order, with its name; a function registered for several signals runs once', async t => {
	t.deepEqual(await scenario('received'), {
		called: ['both:SIGQUIT', 'quitOnly:SIGQUIT'],
		names: ['SIGQUIT listener both', 'SIGQUIT listener quitOnly'],
		again: [],
	});
});

test('no listener for the received signal: those of the first stop signal the app listens for (a Ctrl-C handler when SIGTERM came)', async t => {
	t.deepEqual(await scenario('fallback'), {called: ['onInt:SIGTERM'], names: ['SIGTERM listener onInt']});
});

test('a reload\'s retiring worker: the reload signal\'s listeners, then the stop ones (it is stopping, whatever SIGHUP means to the app)', async t => {
	t.deepEqual(await scenario('retiring'), {called: ['reloadConfig:SIGHUP', 'shutdown:SIGHUP'], names: ['SIGHUP listener reloadConfig', 'SIGHUP listener shutdown']});
});

test('called as Node\'s emit would: all at once, a throw or a rejection does not stop the others and is reported', async t => {
	t.deepEqual(await scenario('failures'), {
		order: ['first starts', 'thrower', 'third', 'first ends'],
		errors: ['SIGTERM listener thrower: boom', 'SIGTERM listener rejecter: later'],
	});
});

test('a held signal the app sends itself while its shutdown runs is not delivered; at other times it is', async t => {
	t.deepEqual(await scenario('self-signal'), {intercepted: ['SIGTERM'], delivered: ['SIGHUP', 'SIGTERM']});
});

test('removeListener and removeAllListeners take held listeners away; ours stay', async t => {
	t.deepEqual(await scenario('remove'), {afterRemove: ['keep'], afterRemoveAll: [], oursStill: true});
});
