/** Ports and addresses on the loopback interface, for the tests and the benchmarks. */
import {once} from 'node:events';
import net from 'node:net';
import {pEvent} from 'p-event';

/** `http://127.0.0.1:<port><path>`. */
export const url = (port: number, path = '/'): string => `http://127.0.0.1:${port}${path}`;

/** `n` distinct ports that were free a moment ago (bound to port 0 together, then released). */
export async function freePorts(n: number): Promise<number[]> {
	const servers = await Promise.all(Array.from({length: n}, async () => {
		const server = net.createServer().listen(0, '127.0.0.1');
		await once(server, 'listening');
		return server;
	}));
	const ports = servers.map(server => (server.address() as net.AddressInfo).port);
	await Promise.all(servers.map(async server => once(server.close(), 'close')));
	return ports;
}

/** A port nothing listens on right now. */
export async function freePort(): Promise<number> {
	const [port] = await freePorts(1);
	return port!;
}

/** True when something accepts connections on 127.0.0.1:port. */
export async function isListening(port: number): Promise<boolean> {
	const socket = net.connect(port, '127.0.0.1');
	try {
		await pEvent(socket, 'connect');
		return true;
	} catch {
		return false;
	} finally {
		socket.destroy();
	}
}
