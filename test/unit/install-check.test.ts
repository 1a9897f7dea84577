// The bundle's list of its own files (src/install-check.ts): what a partial or
// truncated copy of the package is told by, and what it must not misjudge.
import {mkdirSync, mkdtempSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {pathToFileURL} from 'node:url';
import test, {type ExecutionContext} from 'ava';
import {damagedFiles} from '../../src/install-check.js';

/** A directory with `files` (name: text) and the list `list` (written as given); removed in teardown. Returns the list's URL. */
function bundle(t: ExecutionContext, files: Record<string, string>, list: unknown): URL {
	const root = mkdtempSync(path.join(os.tmpdir(), 'gc-install-'));
	t.teardown(() => {
		rmSync(root, {recursive: true, force: true});
	});
	for (const [name, text] of Object.entries(files)) {
		mkdirSync(path.dirname(path.join(root, name)), {recursive: true});
		writeFileSync(path.join(root, name), text);
	}

	writeFileSync(path.join(root, 'graceful-cluster-files.json'), typeof list === 'string' ? list : JSON.stringify(list));
	return pathToFileURL(path.join(root, 'graceful-cluster-files.json'));
}

test('a whole bundle: nothing to say; a file missing or of another size: named, with what is wrong', t => {
	const files = {'cli.js': 'abc', 'worker/index.js': 'abcdef', 'worker/watchdog-thread.js': 'xyz'};
	const whole = bundle(t, files, {package: 'graceful-cluster', files: {'cli.js': 3, 'worker/index.js': 6, 'worker/watchdog-thread.js': 3}});
	t.deepEqual(damagedFiles(whole), []);
	const broken = bundle(t, {'cli.js': 'abc', 'worker/index.js': 'abc'}, {package: 'graceful-cluster', files: {'cli.js': 3, 'worker/index.js': 6, 'worker/watchdog-thread.js': 3}});
	const damaged = damagedFiles(broken);
	t.is(damaged.length, 2);
	t.regex(damaged[0]!, /\/worker\/index\.js \(3 bytes; the build wrote 6\)$/);
	t.regex(damaged[1]!, /\/worker\/watchdog-thread\.js \(missing\)$/);
	t.deepEqual(damagedFiles(broken, 'cli'), [], 'only the files under the prefix asked for');
});

test('no list, or a file of that name that is not ours (the helper bundled into an app\'s build): nothing to judge by', t => {
	t.deepEqual(damagedFiles(new URL('file:///nonexistent/graceful-cluster-files.json')), []);
	t.deepEqual(damagedFiles(bundle(t, {}, {uploads: {'a.png': 10}})), []);
	t.deepEqual(damagedFiles(bundle(t, {}, {package: 'other', files: {'a.js': 1}})), []);
	t.deepEqual(damagedFiles(bundle(t, {}, 'not json')), []);
});
