# The image examples/kubernetes/tfjob.yaml runs: ssptk and its dependencies (TensorFlow on the CPU).
#   docker build -t <registry>/ssptk:latest .                  (CPU)
#   docker build --build-arg BASE=tensorflow/tensorflow:2.21.0-gpu -t <registry>/ssptk:gpu .   (GPU nodes)
#   docker push <registry>/ssptk:latest                         then set the yaml's image: to it
# ssptk is not on PyPI: the image installs this checkout.
ARG BASE=python:3.11-slim
FROM ${BASE}
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1
WORKDIR /opt/ssptk
COPY pyproject.toml README.md ./
COPY ssptk ./ssptk
RUN pip install . && ssptk --help >/dev/null
# The tasks write their logs to /runs/<pod name> (a ReadWriteMany volume in the TFJob)
WORKDIR /runs
ENTRYPOINT []
CMD ["ssptk", "--help"]
