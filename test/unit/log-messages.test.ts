// Every log message graceful-cluster writes is in docs/logs.md's table: people
// grep for these lines and alert on them.
import test from 'ava';
import {readdirSync, readFileSync} from 'node:fs';
import path from 'node:path';
import {ROOT} from '../helpers/cluster.js';

function sources(dir: string): string[] {
	return readdirSync(dir, {withFileTypes: true}).flatMap(entry => entry.isDirectory() ? sources(path.join(dir, entry.name)) : entry.name.endsWith('.ts') ? [path.join(dir, entry.name)] : []);
}

/** The fixed messages of `logger.<level>(..., 'message')` calls, one line or several. */
function messages(): Set<string> {
	const found = new Set<string>();
	for (const file of sources(path.join(ROOT, 'src'))) {
		const text = readFileSync(file, 'utf8');
		for (const match of text.matchAll(/\.(?:trace|debug|info|warn|error|fatal)\((?:[^;]*?, )?'((?:[^'\\\n]|\\.)+)'\);/g)) {
			found.add(match[1]!.replaceAll('\\\'', '\''));
		}
	}

	return found;
}

test('every fixed log message is in docs/logs.md\'s table', t => {
	const logs = readFileSync(path.join(ROOT, 'docs/logs.md'), 'utf8');
	// The first cell of each row, and each backticked message in it.
	const documented = logs.split('\n').filter(line => line.startsWith('| `')).flatMap(line => [...line.split(' | ')[0]!.matchAll(/`([^`]+)`/g)].map(match => match[1]!));
	const found = messages();
	t.true(found.size > 40, `found ${found.size} messages`);
	for (const message of found) {
		t.true(documented.some(row => row === message || (row.endsWith('...') && message.startsWith(row.slice(0, -3).trimEnd()))), message);
	}
});
