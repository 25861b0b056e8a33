// A Service and a Deployment built from params.libsonnet. Files ending in .libsonnet are only
// imported; each .jsonnet file is evaluated and must give an object or an array of objects.
local params = import 'params.libsonnet';
local labels = { app: params.name };

[
  {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: params.name },
    spec: {
      type: params.type,
      selector: labels,
      ports: [{ port: params.servicePort, targetPort: params.containerPort }],
    },
  },
  {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: params.name },
    spec: {
      replicas: params.replicas,
      revisionHistoryLimit: 3,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels: labels },
        spec: {
          containers: [{
            name: params.name,
            image: params.image,
            ports: [{ containerPort: params.containerPort }],
          }],
        },
      },
    },
  },
]
