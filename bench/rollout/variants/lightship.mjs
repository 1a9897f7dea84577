// lightship as its README sets it up: probes on their own port (CHECK_PORT here,
// 9000 by default), signalReady() once listening, server.close() as the shutdown
// handler. detectKubernetes: false keeps the Kubernetes behaviour (the 5 s
// shutdownDelay) outside a cluster.
import http from 'node:http';
import {createLightship} from 'lightship';
import handler from './handler.cjs';

const lightship = await createLightship({port: Number(process.env.CHECK_PORT), detectKubernetes: false});
const server = http.createServer(handler.handle).listen(handler.port, handler.host, () => {
	lightship.signalReady();
});
lightship.registerShutdownHandler(() => {
	server.close();
});
