/**
 * The package as a user gets it: the tarball `npm pack` makes from the current
 * build (`--ignore-scripts`: `npm test` has built already, and `prepack` would
 * only build again), its file list, and a fresh app with it installed.
 */
import {spawnSync} from 'node:child_process';
import {mkdtempSync, writeFileSync} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {ROOT} from './cluster.js';

/** Runs npm, throws with its output if it fails; stdout and stderr (its warnings). */
function npm(args: string[], cwd: string): {stdout: string; stderr: string} {
	const result = spawnSync('npm', args, {cwd, encoding: 'utf8'});
	if (result.status !== 0) {
		throw new Error(`npm ${args.join(' ')} exited ${result.status ?? result.signal}:\n${result.stdout}${result.stderr}`, {cause: result.error});
	}
	return {stdout: result.stdout, stderr: result.stderr};
}

/** The paths `npm pack` puts in the tarball, relative to the package root. */
export function packedFiles(): string[] {
	const [pack] = JSON.parse(npm(['pack', '--dry-run', '--json', '--ignore-scripts'], ROOT).stdout) as Array<{files: Array<{path: string}>}>;
	return pack!.files.map(file => file.path);
}

export interface InstalledApp {
	readonly dir: string;
	/** What npm printed on stderr while installing: its warnings. */
	readonly installWarnings: string;
}

/**
 * A new directory holding an app (its own `package.json`, with a version that is
 * not graceful-cluster's) that has installed the packed tarball, as a user would.
 */
export function installPacked(prefix: string, version = '1.0.0'): InstalledApp {
	const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
	const tarball = npm(['pack', '--silent', '--ignore-scripts', '--pack-destination', dir], ROOT).stdout.trim().split('\n').pop()!;
	writeFileSync(path.join(dir, 'package.json'), JSON.stringify({name: 'user-app', version, private: true}));
	const installed = npm(['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(dir, tarball)], dir);
	return {dir, installWarnings: installed.stderr};
}
