// lightship 7.3.0 (the last version for Node 20; v9 needs Node 22) is published
// without its compiled dist/ on this registry mirror: only src/*.ts is in the
// tarball, so `import 'lightship'` fails. Build it once with the repo's own
// TypeScript (a devDependency of the root package) into node_modules/lightship/dist.
import {execFileSync} from 'node:child_process';
import {cpSync, existsSync, mkdtempSync, rmSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export function ensureLightship() {
	const pkg = new URL('../node_modules/lightship/', import.meta.url).pathname;
	if (existsSync(path.join(pkg, 'dist/index.js'))) {
		return;
	}

	const tsc = new URL('../../node_modules/.bin/tsc', import.meta.url).pathname;
	if (!existsSync(tsc)) {
		throw new Error('lightship has no dist/ and the root package\'s TypeScript is missing: run `npm install` at the repo root first.');
	}

	process.stderr.write('bench: building lightship 7.3.0\'s missing dist/ from its src/ (once)\n');
	// tsc never emits files that live under node_modules, so compile a copy.
	const temporary = mkdtempSync(path.join(os.tmpdir(), 'lightship-'));
	try {
		cpSync(path.join(pkg, 'src'), path.join(temporary, 'src'), {recursive: true});
		writeFileSync(path.join(temporary, 'package.json'), '{"type":"module"}');
		execFileSync(tsc, [
			'--outDir', path.join(pkg, 'dist'), '--rootDir', path.join(temporary, 'src'),
			'--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022',
			'--skipLibCheck', '--noCheck', '--types', 'node',
			'--typeRoots', new URL('../../node_modules/@types', import.meta.url).pathname,
			path.join(temporary, 'src/index.ts'),
		], {stdio: 'inherit'});
	} finally {
		rmSync(temporary, {recursive: true, force: true});
	}
}
