// The logical working directory (issue 18): PWD through a release symlink when it
// still names the directory we are in, the kernel's path otherwise.
import test from 'ava';
import {mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {parseArgs} from '../../src/args.js';
import {forkCwd, logicalCwd} from '../../src/working-directory.js';

/** root/releases/a, root/other, root/current -> releases/a; `real` as the kernel names releases/a. */
function tree(t: import('ava').ExecutionContext) {
	const root = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'gc-cwd-')));
	t.teardown(() => {
		rmSync(root, {recursive: true, force: true});
	});
	const real = path.join(root, 'releases', 'a');
	mkdirSync(real, {recursive: true});
	mkdirSync(path.join(root, 'other'));
	writeFileSync(path.join(real, 'server.mjs'), '');
	const current = path.join(root, 'current');
	symlinkSync(path.join('releases', 'a'), current);
	return {root, real, current};
}

test('PWD through a symlink to the directory we are in is the working directory', t => {
	const {real, current} = tree(t);
	t.is(logicalCwd(current, real), current);
	t.is(logicalCwd(`${current}/./`, real), current, 'normalised');
});

test('a PWD that is unset, relative, missing or names another directory is not used', t => {
	const {root, real, current} = tree(t);
	t.is(logicalCwd(undefined, real), real, 'unset (systemd, exec from a non-shell)');
	t.is(logicalCwd('current', real), real, 'relative');
	t.is(logicalCwd(path.join(root, 'gone'), real), real, 'missing');
	t.is(logicalCwd(path.join(root, 'other'), real), real, 'stale: the parent changed directory without updating it');
	t.is(logicalCwd(path.join(current, 'server.mjs'), real), real, 'a file');
	// Lexically current/.. is root; the kernel's current/.. is releases/.
	t.is(logicalCwd(path.join(current, '..', 'releases', 'a'), real), path.join(root, 'releases', 'a'));
	t.is(logicalCwd(`${current}/..`, path.join(root, 'releases')), path.join(root, 'releases'), 'not root: that is another directory');
});

test('workers get a directory of their own only when it goes through a link; else they inherit the primary\'s', t => {
	const {real, current} = tree(t);
	t.is(forkCwd(current, real), current);
	t.is(forkCwd(real, real), undefined, 'inherited: it works even after the directory is deleted');
});

test('parseArgs keeps the script and the working directory through the link', t => {
	const {current} = tree(t);
	const result = parseArgs(['-w', '1', './server.mjs'], current);
	t.is(result.kind, 'run');
	if (result.kind === 'run') {
		t.is(result.options.script, path.join(current, 'server.mjs'));
		t.is(result.options.cwd, current);
	}
});
