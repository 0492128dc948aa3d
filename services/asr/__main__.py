from services.asr.service import SERVICE, build
from services.common.server import run_service

if __name__ == "__main__":
    run_service(SERVICE, build)
