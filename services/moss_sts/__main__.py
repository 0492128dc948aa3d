from services.common.server import run_service
from services.moss_sts.service import SERVICE, build

if __name__ == "__main__":
    run_service(SERVICE, build)
